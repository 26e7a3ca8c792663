"""The real SmolLM2-135M in each format: exact weights and logits, transformers as a peer, the
engine's arm == solo, and `load_model` on the written directory.

SmolLM2's 576-wide layers make FP8 128-blocks partial (576 = 4.5 x 128; the k/v projections have
192 outputs), and W4A16 uses group 32 (128 does not divide 576). transformers cannot load the FP8
checkpoint ("not divisible by scale grid"), so it is a peer for W4A16 and BNB4 only.
"""

from __future__ import annotations

import copy

import pytest
import torch
from helpers.engine_reference import assert_matches_reference
from helpers.session_once import built_once

from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.quant import compute_paths, write_bnb4, write_fp8, write_w4a16

pytestmark = pytest.mark.slow

WRITERS = {
    "fp8": (write_fp8, dict(block_size=(128, 128), scale_dtype=torch.bfloat16)),
    "w4a16": (write_w4a16, dict(group_size=32, symmetric=True)),
    "bnb4": (write_bnb4, dict(quant_type="nf4", double_quant=True)),
}
TEXT = (
    "Question: Could the members of The Police perform lawful arrests? Think it through step by step. "
    "The Police were an English rock band formed in London in 1977. Sting, Andy Summers and Stewart "
    "Copeland were musicians, not law enforcement officers. "
)


@pytest.fixture(scope="module")
def smol_checkpoints(smollm2, tmp_path_factory):
    """SmolLM2 written in each format, once a session however pytest-xdist splits this module
    (tests/helpers/session_once.py); the tests only read them."""

    def write_all(root):
        for name, (write, kwargs) in WRITERS.items():
            write(smollm2.model, root / name, tokenizer=smollm2.tokenizer, **kwargs)

    root = built_once(tmp_path_factory, "smollm2-quantised", write_all)
    return {name: root / name for name in WRITERS}


def _reference(model, weights):
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for name, w in weights.items():
            ref.get_submodule(name).weight.copy_(w.to(torch.float32))
    return ref.eval()


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_smollm2_weights_logits_and_32_greedy_tokens_match_the_library_reference(
    smollm2, smol_checkpoints, qt, fmt
):
    model = qt.load_quantized(smol_checkpoints[fmt], compute="exact")
    reference = qt.reference_weights(smol_checkpoints[fmt])
    modules = qt.quantised_modules(model)
    assert len(modules) == 30 * 7 and set(modules) == set(reference)
    for name, module in modules.items():
        assert torch.equal(module.dequantize(), reference[name]), name
    ref = _reference(smollm2.model, reference)
    ids = smollm2.tokenizer(TEXT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert qt.rel_diff(model(ids).logits, ref(ids).logits) <= 1e-5
    prompt = ids[:, :24]
    assert qt.greedy(model, prompt, 32) == qt.greedy(ref, prompt, 32)


@pytest.mark.parametrize("fmt", ["w4a16", "bnb4"])
def test_smollm2_transformers_loads_the_checkpoint_to_the_same_logits(
    smollm2, smol_checkpoints, qt, fmt
):
    import warnings

    from transformers import AutoModelForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = AutoModelForCausalLM.from_pretrained(
            smol_checkpoints[fmt], dtype=torch.float32, device_map="cpu"
        ).eval()
    for module in theirs.modules():  # bitsandbytes' plain matmul_4bit, not its bf16 CPU repacking
        if hasattr(module, "support_avx512bf16_for_cpu"):
            module.support_avx512bf16_for_cpu = False
    ours = qt.load_quantized(smol_checkpoints[fmt], compute="exact")
    ids = smollm2.tokenizer(TEXT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert qt.rel_diff(ours(ids).logits, theirs(ids).logits) <= 1e-5


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_smollm2_quantised_arms_equal_solo_runs_through_load_model(smol_checkpoints, qt, fmt):
    from nudgeability.models.loader import load_model

    # the exact path: arms == solo to 1e-4 (tests/models/quant/test_engine_on_quantised.py covers fused)
    loaded = load_model(smol_checkpoints[fmt], quant_compute="exact")
    assert qt.quantised_modules(loaded.model) and loaded.source.quant_method is not None
    tok = loaded.tokenizer
    engine = Engine(loaded.model, tok)
    prefix = tok(TEXT * 3)["input_ids"][:200]
    sentences = [
        " I am confident.",
        " I doubt this.",
        " Hmm.",
        " Let me check each step again before I answer.",
    ]
    suffixes = [tok(s)["input_ids"] for s in sentences]
    arms = engine.fork(prefix, suffixes, SamplingParams(max_new_tokens=8), return_logits=True)
    for suffix, arm in zip(suffixes, arms):
        assert_matches_reference(loaded.model, arm, prefix + suffix, 8, engine.eos_ids)


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_smollm2_fp32_kernels_decode_the_exact_paths_greedy_tokens(
    smollm2, smol_checkpoints, qt, fmt
):
    """The fused fp32 kernels differ from the exact path only in the order of fp32 sums: on
    these prompts that changes no greedy token."""
    fused = qt.load_quantized(smol_checkpoints[fmt], compute="fused")
    paths = {p for by in compute_paths(fused).values() for p in by}
    assert len(paths) == 1 and paths.pop().endswith("_simd(fp32)")
    exact = qt.load_quantized(smol_checkpoints[fmt], compute="exact")
    ids = smollm2.tokenizer(TEXT * 2)["input_ids"]
    prompts = [ids[start : start + 40 + 7 * start] for start in (0, 3, 9, 17, 30)]
    params = SamplingParams(max_new_tokens=32, ignore_eos=True)
    got = [c.token_ids for c in Engine(fused, smollm2.tokenizer).generate(prompts, params)]
    want = [c.token_ids for c in Engine(exact, smollm2.tokenizer).generate(prompts, params)]
    assert got == want
