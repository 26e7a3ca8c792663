"""transformers as a peer: where it loads one of our checkpoints on CPU, its logits equal ours.

What transformers 5.24 could load here (CPU):
- FP8 blocks: yes, dequantised to plain linears at load, when each dimension is a multiple of the
  block or smaller than it (it infers the block from the scale grid); not SmolLM2 (576 = 4.5 x 128).
- compressed-tensors pack-quantized: symmetric yes (decompressed on the first forward);
  asymmetric no (it expects unpacked zero points: "size mismatch" on weight_zero_point).
- bitsandbytes nf4/fp4: yes; its CPU path repacks weights for AVX512-BF16 and computes in bf16,
  which also fails on layers with fewer than 32 outputs (Gemma 4's per-layer gate), so we compare
  with that repacking switched off (`support_avx512bf16_for_cpu = False`), i.e. bitsandbytes'
  plain `matmul_4bit`.
And the other way: a checkpoint transformers itself quantises and saves with bitsandbytes loads
here to the same weights and logits.
"""

from __future__ import annotations

import warnings

import pytest
import torch

ARCHS = ("qwen3", "gemma4", "glm4")
PEER_FORMATS = ("fp8_b128_bf16", "w4a16_g32_sym", "bnb_nf4_dq", "bnb_fp4_dq")


def _hf_load(directory, **kwargs):
    from transformers import AutoModelForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(
            directory, dtype=torch.float32, device_map="cpu", **kwargs
        )
    for module in model.modules():
        if hasattr(module, "support_avx512bf16_for_cpu"):
            module.support_avx512bf16_for_cpu = False
    return model.eval()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("fmt", PEER_FORMATS)
def test_transformers_loads_our_checkpoint_to_the_same_logits(checkpoint, qt, arch, fmt):
    case = checkpoint(arch, fmt)
    ours, theirs = qt.load(case), _hf_load(case.directory)
    ids = torch.randint(3, 300, (1, 40), generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        assert qt.rel_diff(ours(ids).logits, theirs(ids).logits) <= 1e-5


def test_transformers_cannot_load_asymmetric_pack_quantized_but_we_can(checkpoint, qt):
    # Recorded so that a transformers fix shows up: this test then fails and the note above is updated.
    case = checkpoint("qwen3", "w4a16_g32_asym")
    with pytest.raises(Exception, match="(?i)mismatch"):
        _hf_load(case.directory)
    assert qt.quantised_modules(qt.load(case))


@pytest.mark.parametrize("arch", ["qwen3", "gemma4"])
def test_a_bnb_checkpoint_quantised_and_saved_by_transformers_loads_to_the_same_weights(
    qt, tmp_path, arch
):
    from transformers import BitsAndBytesConfig

    from nudgeability.models.testing.tiny import tiny_model

    tiny_model(arch).save_pretrained(tmp_path / "fp32")
    config = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.float32,
    )
    hf = _hf_load(tmp_path / "fp32", quantization_config=config)
    hf.save_pretrained(tmp_path / "bnb")
    hf = _hf_load(tmp_path / "bnb")  # reload, so both read the same saved bytes
    ours = qt.load_quantized(tmp_path / "bnb", compute="exact")
    reference = qt.reference_weights(tmp_path / "bnb")
    modules = qt.quantised_modules(ours)
    assert set(modules) == set(reference) and modules
    for name, module in modules.items():
        assert torch.equal(module.dequantize(), reference[name]), name
    ids = torch.randint(3, 300, (1, 40), generator=torch.Generator().manual_seed(12))
    with torch.no_grad():
        assert qt.rel_diff(ours(ids).logits, hf(ids).logits) <= 1e-5
