"""benchkit.gpu.quant's CPU-runnable logic, so that it runs first time on a GPU: its packing
builds layers whose exact weights are the original ones within the formats' quantisation error,
its fused-vs-exact comparison runs, and swapping formats into a model and back restores it."""

from __future__ import annotations

import time

import pytest
import torch


@pytest.fixture(scope="module")
def gpu_quant():
    from benchkit.gpu import quant

    return quant


@pytest.mark.parametrize("fmt", ["fp8", "w4a16", "nf4"])
def test_the_scripts_packing_round_trips_within_the_formats_error(gpu_quant, fmt):
    w = torch.randn(48, 256, generator=torch.Generator().manual_seed(0))
    layer = gpu_quant.quantised_layer(fmt, w)
    back = gpu_quant.exact_weight(fmt, layer, torch.float32)
    # largest step of each grid relative to a group's / block's max: e4m3 2^-4 (relative to the
    # element), int4 symmetric 1/7 per half step, NF4's widest gap (-1 to -0.696) / 2
    if fmt == "fp8":
        assert bool(((back - w).abs() <= w.abs() * 2.0**-4 + 1e-6).all())
    else:
        width = gpu_quant.W4_GROUP if fmt == "w4a16" else gpu_quant.NF4_BLOCK
        amax = w.reshape(-1, width).abs().amax(-1, keepdim=True)
        step = amax / 7 / 2 if fmt == "w4a16" else amax * (1 - 0.6961928) / 2
        err = (back - w).reshape(-1, width).abs()
        # W4A16 dequantises in its bf16 scale's dtype: one more bf16 rounding of the result
        rounding = back.reshape(-1, width).abs() * 2.0**-8 if fmt == "w4a16" else 0
        assert bool((err <= step * (1 + 1e-2) + rounding + 1e-6).all())


def test_fused_against_exact_comparison_runs_and_reports_each_path(gpu_quant):
    checks, skipped = gpu_quant.layer_checks(
        "cpu", [(64, 256), (48, 128)], rows=(1, 3), dtype=torch.float32
    )
    assert skipped is None and len(checks) == 3 * 2 * 2
    for fmt, shape, path, rows, rel in checks:
        assert path != "exact", (fmt, shape)
        assert rel < 2e-2, (fmt, shape, path, rows, rel)  # bf16 kernels on CPU: ~2^-8 per layer
    _, skipped = gpu_quant.layer_checks("cpu", [(64, 256)], deadline=time.monotonic() - 1)
    assert skipped == "layer checks from fp8 [64, 256] on"


def test_swapping_a_format_in_and_back_restores_the_model(gpu_quant):
    model = gpu_quant.build_model("cpu", **dict(gpu_quant.DRY_MODEL, vocab_size=300)).float()
    ids = torch.randint(0, 300, (1, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(ids).logits
        full = gpu_quant.stored_bytes(model)
        originals = gpu_quant.swap(model, "w4a16")
        assert len(originals) == 2 * 7 and gpu_quant.stored_bytes(model) < full / 2
        quantised = model(ids).logits
        gpu_quant.restore(model, originals)
        assert torch.equal(model(ids).logits, before)
    assert not torch.equal(quantised, before)


def test_without_cuda_the_section_says_so(gpu_quant):
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert gpu_quant.section(time.monotonic() + 60) == [
        ("quant on CUDA", "skipped: no CUDA device (use --dry-run on CPU)")
    ]


def test_the_one_gpu_driver_runs_this_section(monkeypatch):
    """The GPU check's runner finds the section by its SECTIONS entry and calls its `section`."""
    from benchkit.gpu import check as gpu_check

    monkeypatch.delenv("OUT", raising=False)  # no partial copy written beside the test
    assert gpu_check.SECTIONS["quant"] == "benchkit.gpu.quant"
    text = gpu_check.run(["quant"], budget_s=60)
    assert "| quant | section time |" in text and "failed" not in text, text
    if not torch.cuda.is_available():
        assert "| quant | quant on CUDA | skipped: no CUDA device" in text
