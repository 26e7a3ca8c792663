"""W8A8 through `torch._scaled_mm` with DeepSeek-style block scales, and the contract it must meet.

`torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=...)` computes `out = (a * sa) @ (b * sb)`
for FP8 `a` [M, K] and `b` [K, N]. With 1x128 blocks on `a` (one fp32 scale per row and 128
columns) and 128x128 blocks on `b`, torch 2.13 requires, in its own words spread over
`aten/src/ATen/native/cuda/ScaledBlas.cpp` (`_scaled_mm_out_cuda`, `get_joint_scaling`,
`is_blockwise_1x128_scaling`, `is_blockwise_128x128_scaling`, `_check_deepseek_support`) and
`torch/_meta_registrations.py` (`_check_scaled_mm_sizes`, the `(BlockWise1x128,
BlockWise128x128)` branch):

- `a` and `b` float8_e4m3fn, `a` row-major and `b` column-major (on SM90 cuBLASLt multiplies
  only row-major by column-major), K and N multiples of 16;
- `scale_a` fp32 of shape [M, ceil(K/128)], stored outer-dim-major: stride 1 along M and M along
  the K blocks (a dimension of size 1 may have any stride);
- `scale_b` fp32 of shape [ceil(K/128), ceil(N/128)], entry [kb, nb] scaling `b`'s block (kb, nb):
  torch tests `scale_b.t()` against `b.t()` [N, K], which must be row-major [ceil(N/128),
  ceil(K/128)], i.e. strides (ceil(K/128), 1);
- no `use_fast_accum` (cuBLASLt's blockwise modes refuse it, `CUDABlas.cpp`), SM90 only and
  cuBLASLt >= 12.9 (`_check_deepseek_support`); cuBLAS also wants M a multiple of 4, and the
  128x128 scales in [L4, N/128] with L4 = ceil(K/128) rounded up to 4 (NVIDIA's cuBLAS docs,
  "1D and 128x128 2D block scaling for FP8", as torch's tests pad them): a layer whose K/128
  is not a multiple of 4 is left to the Triton kernel (`scaled_mm_reason`).

A checkpoint's `weight_scale_inv` for `weight` [N, K] is [N/128, K/128] (row-major): for `b =
weight.t()` the scale is `weight_scale_inv.t()` (a view: strides (1, K/128) as required). Its
transpose made contiguous and transposed back (this module's former code) has the checkpoint's
own shape, which matches nothing for a non-square layer and, for a square one, passes every
check with each block's scale taken from the mirrored block.
"""

from __future__ import annotations

import torch

E4M3_MAX = 448.0


class ScaledMMContractError(ValueError):
    """Arguments `torch._scaled_mm` would refuse or misread (the message names the rule)."""


def blockwise_contract(a, b, scale_a, scale_b, use_fast_accum: bool = False) -> None:
    """Raise `ScaledMMContractError` unless the arguments meet torch's (1x128, 128x128) rules."""

    def need(ok: bool, rule: str) -> None:
        if not ok:
            raise ScaledMMContractError(rule)

    m, k = a.shape
    k2, n = b.shape
    kb, nb = -(-k // 128), -(-n // 128)
    fp8 = torch.float8_e4m3fn
    need(a.dtype == fp8 and b.dtype == fp8, f"a, b must be float8_e4m3fn: {a.dtype}, {b.dtype}")
    need(k == k2, f"a {list(a.shape)} and b {list(b.shape)} do not multiply")
    need(a.stride(1) == 1 and (m == 1 or a.stride(0) >= k), f"a not row-major: {a.stride()}")
    need(b.stride(0) == 1 and (n == 1 or b.stride(1) >= k), f"b not column-major: {b.stride()}")
    need(k % 16 == 0 and n % 16 == 0, f"K {k} and N {n} must be multiples of 16")
    need(m % 4 == 0, f"M {m} must be a multiple of 4 (cuBLAS)")
    need(scale_a.dtype == scale_b.dtype == torch.float32, "scales must be float32")
    need(tuple(scale_a.shape) == (m, kb), f"scale_a {list(scale_a.shape)}, want [{m}, {kb}]")
    need(
        (m == 1 or scale_a.stride(0) == 1) and (kb == 1 or scale_a.stride(1) == m),
        f"scale_a strides {scale_a.stride()}, want (1, {m}) (outer-dim-major)",
    )
    need(tuple(scale_b.shape) == (kb, nb), f"scale_b {list(scale_b.shape)}, want [{kb}, {nb}]")
    need(
        (kb == 1 or scale_b.stride(0) == 1) and (nb == 1 or scale_b.stride(1) == kb),
        f"scale_b strides {scale_b.stride()}, want (1, {kb}): scale_b.t() row-major",
    )
    need(not use_fast_accum, "use_fast_accum is refused with blockwise scales")


def scaled_mm_reason(weight: torch.Tensor, block: tuple[int, int], capability, cuda) -> str | None:
    """Why the blockwise `_scaled_mm` cannot take this layer, or None. `capability` is the device's
    (major, minor), `cuda` torch's CUDA version (major, minor): arguments, so that a test can
    drive the path on CPU tensors."""
    n, k = weight.shape
    if capability is None or capability[0] != 9:
        return f"needs SM90 (this device: {capability})"
    if cuda < (12, 9):
        return f"needs CUDA >= 12.9 (torch has {cuda})"
    if tuple(block) != (128, 128):
        return f"blocks {tuple(block)}, not 128x128"
    if n % 128 or k % 128:
        return f"[{n}, {k}] not in whole 128-blocks"
    if (k // 128) % 4:
        # cuBLAS reads 128x128 scales as [L4, N/128] with L4 = K/128 rounded up to 4 (torch's
        # own tests pad them so: test/test_scaled_matmul_cuda.py `_pad_128x128_scales`); torch's
        # size check does not ask for it, so an unpadded layer would pass and be misread
        return f"K {k}: {k // 128} scale blocks, cuBLAS wants a multiple of 4"
    return None


def device_facts(device: torch.device):
    """(capability, CUDA version) of `device`, (None, (0, 0)) off CUDA."""
    if device.type != "cuda":
        return None, (0, 0)
    cuda = tuple(int(v) for v in (torch.version.cuda or "0.0").split(".")[:2])
    return torch.cuda.get_device_capability(device), cuda


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] (K a multiple of 128) as e4m3 codes and fp32 scales [M, K/128] per 1x128 block
    (amax / 448, so each block's largest value maps to e4m3's largest), rows padded to 4."""
    rows, width = x.shape
    pad = (-rows) % 4
    xs = torch.nn.functional.pad(x.float(), (0, 0, 0, pad)).view(rows + pad, width // 128, 128)
    scale = xs.abs().amax(-1).clamp_min(1e-12) / E4M3_MAX
    codes = (xs / scale[..., None]).to(torch.float8_e4m3fn).view(rows + pad, width)
    return codes, scale


def blockwise(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """y = x @ W.T for bf16 or fp16 `x`, FP8 `weight` [N, K] and fp32 `scale` [N/128, K/128],
    through cuBLAS (the output in x's dtype)."""
    rows = x.shape[0]
    codes, x_scale = quantize_rows(x)
    a, b = codes, weight.t()
    scale_a = x_scale.t().contiguous().t()  # [M, K/128], strides (1, M)
    scale_b = scale.t()  # [K/128, N/128], strides (1, K/128): scale_b[kb, nb] = scale[nb, kb]
    blockwise_contract(a, b, scale_a, scale_b)
    y = torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=x.dtype)
    return y[:rows]
