"""Attention kernels that return the log-sum-exp, off CPU: CUDA's fused kernels, chosen by SDPA's
own constraints, and plain matmuls with fp32 softmax statistics for everything else.

`shared_prefix_attention._attend` calls these for each part of a step (on CPU it calls the flash
kernel itself); each returns the normalised output in q's dtype and the fp32 log-sum-exp
`[B, h, M]`, which the parts are merged through.
"""

from __future__ import annotations

import torch

from nudgeability.util import fallbacks

PREFIX_SCORE_ELEMENTS = 1 << 22  # fp32 scores held at once by the explicit path (16 MiB)


HALF = (torch.float16, torch.bfloat16)
FLASH_MAX_HEAD_DIM = 256


def cuda_kernel(q, k, v, bias) -> str:
    """Which CUDA kernel `attend_cuda` calls: "flash", "efficient" or "explicit".

    The ATen ops are called directly, so SDPA's backend checks (aten/src/ATen/native/
    transformers/cuda/sdp_utils.cpp) are not run for us; these are theirs. Flash: fp16/bf16, no
    mask, q/k/v of one head size of at most 256 (a multiple of 8, as the flash kernel's own
    check asks). Memory-efficient: fp32/fp16/bf16, any head size whose q/k/v sizes are multiples
    of the GEMM alignment (8 elements in half precision, 4 in fp32), an additive bias allowed.
    Anything else takes plain matmuls."""
    d = q.shape[-1]
    same = d == k.shape[-1] == v.shape[-1]
    if bias is None and q.dtype in HALF and same and d <= FLASH_MAX_HEAD_DIM and d % 8 == 0:
        return "flash"
    align = 8 if q.dtype in HALF else 4
    if q.dtype in HALF + (torch.float32,) and all(t.shape[-1] % align == 0 for t in (q, k, v)):
        return "efficient"
    return "explicit"


def attend_cuda(q, k, v, bias, scaling: float):
    """The CUDA kernels that return the log-sum-exp, chosen by `cuda_kernel`: flash when no mask
    is needed, the memory-efficient kernel (which takes an additive bias) otherwise. The
    efficient kernel wants a 4-D bias whose rows are 16-element aligned, and pads its
    log-sum-exp to 32 queries."""
    m = q.shape[2]
    kernel = cuda_kernel(q, k, v, bias)
    if bias is None and q.dtype in HALF and kernel != "flash":
        fallbacks.record(
            f"sdpa flash (head_dim {q.shape[-1]}, {q.dtype})",
            "memory-efficient SDPA" if kernel == "efficient" else "explicit matmul attention",
            f"the flash kernel takes head sizes up to {FLASH_MAX_HEAD_DIM}, multiples of 8",
        )
    if kernel == "flash":
        out = CUDA_KERNELS["flash"](q, k, v, 0.0, False, False, scale=scaling)
        return out[0], out[1][..., :m]
    if kernel == "explicit":
        fallbacks.record(
            f"sdpa memory-efficient (head_dim {q.shape[-1]}, {q.dtype})",
            "explicit matmul attention",
            "the head size is not a multiple of the kernel's GEMM alignment",
        )
        return attend_explicit(q, k, v, bias, scaling)
    if bias is not None:
        keys = bias.shape[-1]
        if keys % 16:  # an aligned buffer, read through a view of the real width
            wide = bias.new_zeros(*bias.shape[:-1], keys + 16 - keys % 16)
            wide[..., :keys] = bias
            bias = wide[..., :keys]
        bias = bias.expand(q.shape[0], q.shape[1], m, k.shape[2])
    out = CUDA_KERNELS["efficient"](q, k, v, bias, True, 0.0, False, scale=scaling)
    return out[0], out[1][..., :m]


def causal_cuda(q, k, v, scaling: float, window: int | None = None) -> torch.Tensor | None:
    """Causal attention of the last L of S positions over all S keys in one flash call, q
    `[1, H, L, D]`, k/v `[1, Hk, S, D]` (Hk dividing H: query head h reads key head h // (H/Hk),
    as SDPA's `enable_gqa`) -> `[1, H, L, D]`; None where flash cannot take it (`cuda_kernel`,
    and for a sliding window `flash_takes_window`).

    The flash op's `is_causal` aligns the diagonal to the bottom right, so query i sees keys
    j <= i + S - L: a prefill chunk's queries at positions [c0, c1) against keys [k0, c1)
    (torch/nn/attention/bias.py, `CausalBias._dispatch`, calls it so for its lower-right variant;
    flash's own check only asks that Hk divide H). One call per chunk replaces one SDPA call per
    64 queries, whose masks can cost more host time on a GPU than the kernels, and whose key
    lengths, new at each block, make SDPA build a cuDNN plan for each, a cost the first long
    prefill pays in full (benchmarks/gpu_profile.py).

    With a sliding `window` (a query at position p sees keys at p - window < position <= p, as
    HF's sliding mask), the call is `_flash_attention_forward` with `window_size_left = window - 1`:
    flash's local mask (its `mha_fwd`, flash_api.cpp, and `Mask::apply_mask_local`) keeps key j
    for query i when i + S - L - window_size_left <= j <= i + S - L + window_size_right, and
    `is_causal` sets the right side to 0. That op takes q/k/v as `[B, L, H, D]` (the transpose
    `_scaled_dot_product_flash_attention` makes before calling it)."""
    if cuda_kernel(q, k, v, None) != "flash":
        return None
    if window is None:
        return CUDA_KERNELS["flash"](q, k, v, 0.0, True, False, scale=scaling)[0]
    if not flash_takes_window():
        return None
    out = CUDA_KERNELS["flash_window"](
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        None,
        None,
        q.shape[2],
        k.shape[2],
        0.0,
        True,
        False,
        scale=scaling,
        window_size_left=window - 1,
        window_size_right=0,
    )[0]
    return out.transpose(1, 2)


def flash_takes_window() -> bool:
    """Whether this torch's `_flash_attention_forward` takes `window_size_left` (its schema)."""
    op = getattr(torch.ops.aten, "_flash_attention_forward", None)
    if op is None:
        return False
    return any(a.name == "window_size_left" for a in op.default._schema.arguments)


# The CUDA kernels behind `attend_cuda` and `causal_cuda`, by name: the tests put CPU stand-ins with the same
# signatures here to check the branch's logic.
CUDA_KERNELS = {
    "flash": lambda *a, **kw: torch.ops.aten._scaled_dot_product_flash_attention(*a, **kw),
    "flash_window": lambda *a, **kw: torch.ops.aten._flash_attention_forward(*a, **kw),
    "efficient": lambda *a, **kw: torch.ops.aten._scaled_dot_product_efficient_attention(*a, **kw),
}


def attend_explicit(q, k, v, bias, scaling: float):
    """The same as the CPU flash kernel's output and log-sum-exp, with plain matmuls: fp32 scores in chunks of query rows, so that a
    long prefix's scores stay within PREFIX_SCORE_ELEMENTS."""
    b, h, m, d = q.shape
    out = torch.empty(b, h, m, d, dtype=q.dtype, device=q.device)
    lse = torch.empty(b, h, m, dtype=torch.float32, device=q.device)
    chunk = max(1, PREFIX_SCORE_ELEMENTS // max(1, b * h * k.shape[2]))
    for r0 in range(0, m, chunk):
        r1 = min(m, r0 + chunk)
        s = torch.matmul(q[:, :, r0:r1], k.transpose(-1, -2)).float().mul_(scaling)
        if bias is not None:
            s.add_(bias if bias.shape[2] == 1 else bias[:, :, r0:r1])
        mx = s.amax(dim=-1, keepdim=True)
        e = s.sub_(mx).exp_()
        total = e.sum(dim=-1, keepdim=True)
        out[:, :, r0:r1] = (torch.matmul(e.to(v.dtype), v).float() / total).to(q.dtype)
        lse[:, :, r0:r1] = (mx + total.log()).squeeze(-1)
    return out, lse
