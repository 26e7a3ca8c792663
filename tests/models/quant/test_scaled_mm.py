"""The blockwise `torch._scaled_mm` call, checked on CPU against torch's own rules.

`torch._scaled_mm` has no blockwise CPU kernel, so `torch._scaled_mm` is replaced by
`scaled_mm_as_torch_reads_it`: it asserts every argument against the (BlockWise1x128,
BlockWise128x128) rules, written out here from torch 2.13's `aten/src/ATen/native/cuda/
ScaledBlas.cpp` (`get_joint_scaling` checks `scale_a` against `a` and `scale_b.t()` against
`b.t()`; `is_blockwise_1x128_scaling`, `is_blockwise_128x128_scaling`, `check_size_stride`) and
`torch/_meta_registrations.py` (`_check_scaled_mm_sizes`), then computes what cuBLAS computes from
those arguments as torch lays them out: a[m, k] * scale_a[m, k // 128] and
b[k, n] * scale_b[k // 128, n // 128], multiplied in float64. The reference is computed here from
the checkpoint's weight and scale_inv by explicit indices.
"""

from __future__ import annotations

import os

import pytest
import torch

from nudgeability.models.quant import cuda_kernels
from nudgeability.models.quant.fp8_linear import FP8BlockLinear, quantize_fp8_block
from nudgeability.util import fallbacks


def _cdiv(a, b):
    return -(-a // b)


def _size_stride(t, dim, size, stride):
    # ScaledBlas.cpp check_size_stride: a dimension of size <= 1 may have any stride
    return t.size(dim) == size and (size <= 1 or t.stride(dim) == stride)


def scaled_mm_as_torch_reads_it(a, b, scale_a, scale_b, bias=None, out_dtype=None, **kw):
    m, k = a.shape
    n = b.shape[1]
    assert a.dtype == b.dtype == torch.float8_e4m3fn
    assert a.stride(1) == 1 and b.stride(0) == 1, "row-major a, column-major b (SM90 cuBLASLt)"
    assert k % 16 == 0 and n % 16 == 0 and m % 4 == 0
    # cuBLAS reads 128x128 scales as [L4, N/128], L4 = ceil(K/128) rounded up to 4 (its docs,
    # "1D and 128x128 2D block scaling for FP8"; torch's tests pad to it)
    assert _cdiv(k, 128) % 4 == 0, f"K {k}: {_cdiv(k, 128)} scale blocks, not a multiple of 4"
    assert not kw.get("use_fast_accum", False) and kw.get("scale_result") is None and bias is None
    # _meta_registrations: scale_a (M, ceil(K/128)), scale_b (ceil(K/128), ceil(N/128))
    assert tuple(scale_a.shape) == (m, _cdiv(k, 128)), f"scale_a shape {tuple(scale_a.shape)}"
    assert tuple(scale_b.shape) == (_cdiv(k, 128), _cdiv(n, 128)), (
        f"scale_b shape {tuple(scale_b.shape)}, torch wants {(_cdiv(k, 128), _cdiv(n, 128))}"
    )
    assert scale_a.dtype == scale_b.dtype == torch.float32
    # is_blockwise_1x128_scaling(a, scale_a): stride 1 along M, M along the K blocks
    assert _size_stride(scale_a, 0, m, 1) and _size_stride(scale_a, 1, _cdiv(k, 128), m)
    # is_blockwise_128x128_scaling(b.t(), scale_b.t()): row-major [ceil(N/128), ceil(K/128)]
    sbt = scale_b.t()
    assert _size_stride(sbt, 0, _cdiv(n, 128), _cdiv(k, 128)) and _size_stride(
        sbt, 1, _cdiv(k, 128), 1
    )
    sa = scale_a.double().repeat_interleave(128, 1)[:, :k]
    sb = scale_b.double().repeat_interleave(128, 0)[:k].repeat_interleave(128, 1)[:, :n]
    return ((a.double() * sa) @ (b.double() * sb)).to(out_dtype or a.dtype)


def _layer(n, k):
    """A weight whose 128x128 blocks differ in scale by powers of 2 (block (i, j) by 2 ** ((i *
    blocks + j) % 5): block (j, i) differs from it for i != j, so a mirrored scale shows)."""
    gen = torch.Generator().manual_seed(n + k)
    factor = 2.0 ** (torch.arange(_cdiv(n, 128) * _cdiv(k, 128), dtype=torch.float32) % 5)
    grid = factor.view(_cdiv(n, 128), _cdiv(k, 128)).repeat_interleave(128, 0)
    w = torch.randn(n, k, generator=gen) * grid.repeat_interleave(128, 1)[:n, :k] * 1e-3
    return quantize_fp8_block(w, (128, 128), torch.float32)


def _reference(x, weight, scale_inv):
    """x quantised per 1x128 block to e4m3 (amax / 448), then times the checkpoint's blocks."""
    rows, k = x.shape
    xs = x.float().view(rows, k // 128, 128)  # in fp32, as the activations are quantised
    step = xs.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 448
    xq = ((xs / step).to(torch.float8_e4m3fn).double() * step.double()).view(rows, k)
    n = weight.shape[0]
    rows_n, cols_k = torch.arange(n)[:, None] // 128, torch.arange(k)[None, :] // 128
    w = weight.double() * scale_inv.double()[rows_n, cols_k]
    return xq @ w.T


@pytest.mark.parametrize("n,k", [(256, 512), (512, 512)])  # non-square, square (q/o_proj)
def test_blockwise_scaled_mm_gets_the_layout_torch_reads(monkeypatch, n, k):
    monkeypatch.setattr(torch, "_scaled_mm", scaled_mm_as_torch_reads_it)
    weight, scale_inv = _layer(n, k)
    x = torch.randn(130, k, generator=torch.Generator().manual_seed(3)).to(torch.float16)
    y = cuda_kernels._scaled_mm_blockwise(x, weight, scale_inv.float().contiguous())
    ref = _reference(x, weight, scale_inv)
    assert y.shape == (130, n) and y.dtype == torch.float16
    # the fp16 output's rounding (2^-11, and half its subnormal step 2^-24), fp64 sums: anything
    # more is a misread scale
    assert bool(((y.double() - ref).abs() <= 2.0**-11 * ref.abs() + 2.0**-25).all())


@pytest.fixture
def checked():
    from nudgeability.models.quant import self_check

    self_check.reset()
    fallbacks.reset()
    yield
    self_check.reset()
    fallbacks.reset()


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the interpreter")
def test_scaled_mm_that_raises_falls_back_to_triton_recorded(monkeypatch, checked):
    pytest.importorskip("triton")
    from nudgeability.models.quant.compute import self_checked

    def refuses(*args, **kwargs):
        raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED")

    monkeypatch.setattr(torch, "_scaled_mm", refuses)
    weight, scale_inv = _layer(256, 512)
    layer = FP8BlockLinear(weight, scale_inv, (128, 128))
    path = cuda_kernels.fp8_path(weight, scale_inv, (128, 128), facts=((9, 0), (12, 9)))
    assert path.name == "triton_fp8+scaled_mm_blockwise"
    run = self_checked(path, layer).run
    x = torch.randn(128, 512, generator=torch.Generator().manual_seed(5)).to(torch.float16)
    y = run(x)
    taken, *more = fallbacks.taken()
    assert more == [], fallbacks.taken()
    assert taken.path.startswith("scaled_mm_blockwise fp8 [256, 512]")
    assert taken.used.startswith("triton_fp8[") and "CUBLAS_STATUS_NOT_SUPPORTED" in taken.reason
    assert list(run.ran) == [taken.used]
    ref = x.double() @ layer.dequantize().double().T
    assert (y.double() - ref).abs().max() <= 2.0**-9 * ref.abs().max()


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the interpreter")
def test_the_scaled_mm_path_passes_its_self_check_with_torch_layout(monkeypatch, checked):
    pytest.importorskip("triton")
    from nudgeability.models.quant.compute import self_checked

    monkeypatch.setattr(torch, "_scaled_mm", scaled_mm_as_torch_reads_it)
    for n, k in [(256, 512), (512, 512)]:
        weight, scale_inv = _layer(n, k)
        layer = FP8BlockLinear(weight, scale_inv, (128, 128))
        path = cuda_kernels.fp8_path(weight, scale_inv, (128, 128), facts=((9, 0), (12, 9)))
        run = self_checked(path, layer).run
        run(torch.randn(128, k).to(torch.float16))
        assert run.ran == {"scaled_mm_blockwise": {128}}, run.ran
    assert fallbacks.taken() == []


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the interpreter")
def test_a_rows_fp8_product_does_not_depend_on_how_many_rows_share_the_call(monkeypatch, checked):
    """Where `_scaled_mm` takes the layer it runs at every row count: a row computed alone, among
    12 or among 300 gets the same activation quantisation (the reference quantises each row's
    1x128 blocks on its own). Until the H200 run of 2026-12-04 calls under 128 rows took the
    weight-only Triton kernel: a decoded token then missed the quantisation its prefill had."""
    pytest.importorskip("triton")
    from nudgeability.models.quant.compute import self_checked

    monkeypatch.setattr(torch, "_scaled_mm", scaled_mm_as_torch_reads_it)
    weight, scale_inv = _layer(256, 512)
    layer = FP8BlockLinear(weight, scale_inv, (128, 128))
    path = cuda_kernels.fp8_path(weight, scale_inv, (128, 128), facts=((9, 0), (12, 9)))
    run = self_checked(path, layer).run
    x = torch.randn(300, 512, generator=torch.Generator().manual_seed(7)).to(torch.float16)
    ref = _reference(x, weight, scale_inv)
    for rows in (1, 12, 300):
        y = run(x[:rows])
        # the fp16 output's rounding only: a weight-only product misses the e4m3 steps of x
        assert bool(
            ((y.double() - ref[:rows]).abs() <= 2.0**-11 * ref[:rows].abs() + 2.0**-25).all()
        )
    assert set(run.ran) == {"scaled_mm_blockwise"}, run.ran
    assert fallbacks.taken() == []


def test_a_layer_whose_scale_blocks_cublas_would_misread_is_left_to_triton(checked):
    """K = 384 gives 3 scale blocks along K, which cuBLAS reads as 4 (the stand-in's rule):
    `_scaled_mm` is never offered for it, whatever the rows."""
    from nudgeability.models.quant import scaled_mm

    weight, scale_inv = _layer(256, 384)
    facts = ((9, 0), (12, 9))
    assert "3 scale blocks" in scaled_mm.scaled_mm_reason(weight, (128, 128), *facts)
    assert scaled_mm.scaled_mm_reason(_layer(256, 512)[0], (128, 128), *facts) is None
    pytest.importorskip("triton")
    with pytest.warns(fallbacks.FallbackWarning, match="3 scale blocks"):
        path = cuda_kernels.fp8_path(weight, scale_inv, (128, 128), facts=facts)
    assert path.name == "triton_fp8"


@pytest.mark.parametrize(
    "facts, why",
    [(((9, 0), (12, 8)), "needs CUDA >= 12.9"), (((8, 0), (12, 9)), "needs SM90")],
)
def test_a_wheel_or_gpu_that_cannot_take_scaled_mm_records_the_triton_path(
    tmp_path, checked, facts, why
):
    """An SM90 GPU with a torch wheel built against CUDA 12.8 (or an SM80 GPU): `_scaled_mm`'s
    blockwise scaling is refused up front, the layer runs the Triton weight-only kernel, and the
    run's manifest says so."""
    from helpers.sealed_fallbacks import manifest_fallbacks

    pytest.importorskip("triton")
    weight, scale_inv = _layer(256, 512)
    with pytest.warns(fallbacks.FallbackWarning, match=why):
        path = cuda_kernels.fp8_path(weight, scale_inv, (128, 128), facts=facts)
    assert path.name == "triton_fp8"
    (taken,) = manifest_fallbacks(tmp_path / "run")
    assert taken["path"] == "scaled_mm_blockwise fp8 [256, 512] block (128, 128)"
    assert taken["used"] == "triton_fp8" and why in taken["reason"]
    fallbacks.reset()
    cuda_kernels.fp8_path(weight, scale_inv, (128, 128))  # CPU tensors: no GPU, no fallback
    assert fallbacks.taken() == []
