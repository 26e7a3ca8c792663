"""The CUDA attention kernel is chosen by SDPA's own constraints (risk 10 of issue 31): the ATen
flash and memory-efficient ops are called directly, which skips the checks that
`scaled_dot_product_attention` would run, so `lse_kernels.attend_cuda` must apply them itself."""

from __future__ import annotations

import pytest
import torch
from helpers.cuda_standins import lse_padded

import nudgeability.engine.attention.lse_kernels as lse_kernels
from nudgeability.util import fallbacks

HALF = (torch.float16, torch.bfloat16)


def torch_allows(kernel: str, dtype, head_dim: int, has_bias: bool) -> bool:
    """torch's rules, from aten/src/ATen/native/transformers/cuda/sdp_utils.cpp (sm80+):
    flash takes fp16/bf16 only, no attention mask, and q/k/v of one head size no larger than
    256 (the flash kernel also wants a multiple of 8); the memory-efficient kernel takes fp32,
    fp16 and bf16, an additive bias, and head sizes that are multiples of its GEMM alignment
    (128 bits: 8 half-precision or 4 fp32 elements), with no upper bound."""
    if kernel == "flash":
        return dtype in HALF and not has_bias and head_dim <= 256 and head_dim % 8 == 0
    align = 8 if dtype in HALF else 4
    return dtype in HALF + (torch.float32,) and head_dim % align == 0


@pytest.mark.parametrize("head_dim", [64, 128, 256, 512])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("has_bias", [False, True])
def test_the_kernel_called_is_one_torch_allows_for_the_shape(
    monkeypatch, head_dim, dtype, has_bias
):
    """Stand-ins with the CUDA ops' signatures assert torch's rules on the arguments they get;
    at 397192c a bf16 call at head_dim 512 (Gemma 4's global layers) went to flash."""
    called = []

    def flash(q, k, v, dropout, causal, debug, *, scale):
        called.append("flash")
        assert torch_allows("flash", q.dtype, q.shape[-1], False), "flash cannot take this"
        return lse_kernels.attend_explicit(q, k, v, None, scale)

    def efficient(q, k, v, bias, compute_lse, dropout, causal, *, scale):
        called.append("efficient")
        assert torch_allows("efficient", q.dtype, q.shape[-1], bias is not None)
        out, lse = lse_kernels.attend_explicit(q, k, v, bias, scale)
        return out, lse_padded(lse, lse.shape[-1])

    monkeypatch.setitem(lse_kernels.CUDA_KERNELS, "flash", flash)
    monkeypatch.setitem(lse_kernels.CUDA_KERNELS, "efficient", efficient)
    q = torch.randn(1, 2, 5, head_dim).to(dtype)
    k, v = torch.randn(1, 2, 7, head_dim).to(dtype), torch.randn(1, 2, 7, head_dim).to(dtype)
    bias = torch.zeros(1, 1, 5, 7, dtype=dtype) if has_bias else None
    fallbacks.reset()
    lse_kernels.attend_cuda(q, k, v, bias, head_dim**-0.5)
    preferred = "flash" if torch_allows("flash", dtype, head_dim, has_bias) else "efficient"
    assert called == [preferred]
    if dtype in HALF and not has_bias and preferred != "flash":  # recorded, named
        assert [f.path for f in fallbacks.taken()] == [f"sdpa flash (head_dim {head_dim}, {dtype})"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_explicit_path_at_head_dim_512_matches_a_plain_softmax(dtype):
    """The kernel-free path (and the reference the efficient kernel is checked against) at
    Gemma 4's global head size, with a bias and its log-sum-exp."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 6, 512, generator=gen).to(dtype)
    k = torch.randn(1, 2, 40, 512, generator=gen).to(dtype)
    v = torch.randn(1, 2, 40, 512, generator=gen).to(dtype)
    visible = torch.rand(1, 1, 6, 40, generator=gen) > 0.3
    visible[..., 0] = True
    bias = torch.where(visible, 0.0, torch.finfo(dtype).min).to(dtype)
    out, lse = lse_kernels.attend_explicit(q, k, v, bias, 512**-0.5)
    scores = (q.double() @ k.double().transpose(-1, -2)) * 512**-0.5
    scores = scores.masked_fill(~visible, float("-inf"))
    expected = torch.softmax(scores, dim=-1) @ v.double()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert torch.allclose(out.double(), expected, atol=tol, rtol=tol)
    assert torch.allclose(lse.double(), torch.logsumexp(scores, dim=-1), atol=tol * 10, rtol=tol)
