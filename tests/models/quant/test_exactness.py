"""Every format on every tiny architecture: weights equal the library's dequantisation bit for bit,
and the quantised model computes what the same architecture computes with those weights in fp32."""

from __future__ import annotations

import pytest
import torch

ARCHS = ("qwen3", "gemma4", "glm4")
FORMAT_IDS = (
    "fp8_b128_bf16",
    "fp8_b32_f16",
    "fp8_b48x40_f32",
    "w4a16_g32_sym",
    "w4a16_g32_asym",
    "w4a16_g128_sym",
    "w8a16_g32_asym",
    "bnb_nf4_dq",
    "bnb_nf4",
    "bnb_fp4_dq",
    "w4a16_channel_asym",
    "fp8_b128_from_bf16",
    "w4a16_g32_asym_from_bf16",
    "bnb_nf4_dq_from_bf16",
)
CASES = [(a, f) for a in ARCHS for f in FORMAT_IDS]


def _prompt(seed: int, length: int = 40) -> torch.Tensor:
    return torch.randint(3, 300, (1, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("arch,fmt", CASES)
def test_every_quantised_layer_dequantises_bit_for_bit_like_the_library(checkpoint, qt, arch, fmt):
    case = checkpoint(arch, fmt)
    model = qt.load(case)
    reference = qt.reference_weights(case.directory)
    modules = qt.quantised_modules(model)
    assert modules and set(modules) == set(
        reference
    )  # every quantised layer is checked, none is missed
    for name, module in modules.items():
        got, want = module.dequantize(), reference[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert torch.equal(got, want), name


@pytest.mark.parametrize("arch,fmt", CASES)
def test_logits_match_the_reference_dequantised_model_and_32_greedy_tokens_agree(
    checkpoint, qt, arch, fmt
):
    case = checkpoint(arch, fmt)
    model = qt.load(case)
    ref = qt.reference_model(case.model, qt.reference_weights(case.directory))
    ids = _prompt(seed=7)
    with torch.no_grad():
        got, want = model(ids).logits, ref(ids).logits
    assert qt.rel_diff(got, want) <= 1e-5
    # quantisation is real: the reference differs from the unquantised model
    with torch.no_grad():
        assert qt.rel_diff(qt.reference_model(case.model, {})(ids).logits, want) > 1e-4
    prompt = _prompt(seed=8, length=12)
    assert qt.greedy(model, prompt, 32) == qt.greedy(ref, prompt, 32)


@pytest.mark.parametrize("arch", ARCHS)
def test_skipped_layers_embeddings_and_norms_are_the_unquantised_tensors(checkpoint, qt, arch):
    case = checkpoint(arch, "w4a16_g32_sym")
    model = qt.load(case)
    original = dict(case.model.named_parameters())
    quantised = qt.quantised_modules(model)
    plain = {
        n: p
        for n, p in model.named_parameters()
        if not any(n.startswith(q + ".") for q in quantised)
    }
    assert "lm_head.weight" in plain or case.model.config.tie_word_embeddings
    assert any("embed_tokens" in n for n in plain) and any("norm" in n for n in plain)
    for name, param in plain.items():
        assert param.dtype == torch.float32 and torch.equal(param, original[name]), name
    # the linears the writer had to skip (group size 32 does not divide Gemma 4's 8-wide per-layer
    # projection) are plain nn.Linear, and every other linear but lm_head is quantised
    linears = {n for n, m in case.model.named_modules() if isinstance(m, torch.nn.Linear)}
    skipped = {n for n in linears if case.model.get_submodule(n).in_features % 32} | {"lm_head"}
    assert set(quantised) == linears - skipped
    for name in skipped:
        assert type(model.get_submodule(name)) is torch.nn.Linear
