"""Triton weight-only matmul kernels for the three formats, reading each checkpoint's own layout.

Each program computes one [BLOCK_M, BLOCK_N] tile of y = x @ W.T: for every BLOCK_K slice it loads
the activations, loads and decodes the matching weight codes in registers into the activations'
dtype (the same rounding as the exact path's dequantisation followed by a cast), and accumulates
`tl.dot` in fp32. The weight is read once per tile column at its stored size: 0.5 byte (int4,
NF4) or 1 byte (FP8) per element, never written back in full precision.

- `w4a16_matmul`: compressed-tensors int32 words, 8 fields per word, column j in bits
  4*(j % 8); W = (f - 8 - zp) * s, with per-group scales s [N, K/G] and signed zero points.
- `fp8_matmul`: float8_e4m3fn weights read as bytes and decoded by bit arithmetic (e4m3 magnitude
  bits shifted into a float16, times 256: exact, and portable to GPUs without FP8 units); W =
  fp32(code) * scale_inv[n // B0, k // B1].
- `nf4_matmul`: bitsandbytes' flat packing, element e = n*K + k in byte e // 2, high nibble
  first; W = table[code] * absmax[e // blocksize].

Masks cover partial tiles on every side. Triton is imported lazily (the `gpu` extra); with
`TRITON_INTERPRET=1` the same kernels run on CPU tensors, which is how CI tests them.
"""

from __future__ import annotations

from functools import lru_cache

import torch

BLOCK = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=64)


def available() -> bool:
    """Whether Triton can be imported."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@lru_cache(maxsize=1)
def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def w4a16(
        x_ptr, w_ptr, s_ptr, zp_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_sn, stride_ym,
        GROUP: tl.constexpr, HAS_ZP: tl.constexpr, PRECISION: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ):  # fmt: skip
        offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            x_mask = (offs_m[:, None] < M) & (k[None, :] < K)
            x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :], mask=x_mask, other=0.0)
            w_mask = (offs_n[:, None] < N) & (k[None, :] < K)
            words = tl.load(
                w_ptr + offs_n[:, None] * stride_wn + (k // 8)[None, :], mask=w_mask, other=0
            )
            q = ((words >> ((k % 8) * 4)[None, :]) & 0xF) - 8
            group = (k // GROUP)[None, :]
            if HAS_ZP:
                q -= tl.load(zp_ptr + offs_n[:, None] * stride_sn + group, mask=w_mask, other=0)
            s = tl.load(s_ptr + offs_n[:, None] * stride_sn + group, mask=w_mask, other=0.0)
            w = (q.to(tl.float32) * s.to(tl.float32)).to(s.dtype).to(x.dtype)
            acc += tl.dot(x, tl.trans(w), input_precision=PRECISION)
        y_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        y_at = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :]
        tl.store(y_at, acc.to(y_ptr.dtype.element_ty), mask=y_mask)

    @triton.jit
    def fp8(
        x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_sn, stride_ym,
        B0: tl.constexpr, B1: tl.constexpr, PRECISION: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ):  # fmt: skip
        offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            x_mask = (offs_m[:, None] < M) & (k[None, :] < K)
            x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :], mask=x_mask, other=0.0)
            w_mask = (offs_n[:, None] < N) & (k[None, :] < K)
            b = tl.load(w_ptr + offs_n[:, None] * stride_wn + k[None, :], mask=w_mask, other=0)
            b = b.to(tl.int16)
            half = ((b & 0x7F) << 7) | ((b & 0x80) << 8)
            value = half.to(tl.float16, bitcast=True).to(tl.float32) * 256.0
            s = tl.load(
                s_ptr + (offs_n // B0)[:, None] * stride_sn + (k // B1)[None, :],
                mask=w_mask,
                other=0.0,
            )
            w = (value * s.to(tl.float32)).to(x.dtype)
            acc += tl.dot(x, tl.trans(w), input_precision=PRECISION)
        y_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        y_at = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :]
        tl.store(y_at, acc.to(y_ptr.dtype.element_ty), mask=y_mask)

    @triton.jit
    def nf4(
        x_ptr, w_ptr, absmax_ptr, table_ptr, y_ptr, M, N, K, stride_xm, stride_ym,
        BLOCKSIZE: tl.constexpr, PRECISION: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ):  # fmt: skip
        offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            x_mask = (offs_m[:, None] < M) & (k[None, :] < K)
            x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :], mask=x_mask, other=0.0)
            w_mask = (offs_n[:, None] < N) & (k[None, :] < K)
            e = offs_n[:, None].to(tl.int64) * K + k[None, :]
            byte = tl.load(w_ptr + e // 2, mask=w_mask, other=0).to(tl.int32)
            code = tl.where(e % 2 == 0, byte >> 4, byte & 0xF)
            value = tl.load(table_ptr + code, mask=w_mask, other=0.0)
            scale = tl.load(absmax_ptr + e // BLOCKSIZE, mask=w_mask, other=0.0)
            w = (value * scale).to(x.dtype)
            acc += tl.dot(x, tl.trans(w), input_precision=PRECISION)
        y_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        y_at = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :]
        tl.store(y_at, acc.to(y_ptr.dtype.element_ty), mask=y_mask)

    return triton, {"w4a16": w4a16, "fp8": fp8, "nf4": nf4}


def w4a16_matmul(
    x: torch.Tensor,
    packed: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    group_size: int,
) -> torch.Tensor:
    """x [M, K] @ W.T for compressed-tensors int32 `packed` [N, K/8], `scale` [N, K/G] and signed
    `zero_point` [N, K/G] (int32; None: symmetric)."""
    triton, kernels = _kernels()
    x = x.contiguous()
    rows, width = x.shape
    n_out = packed.shape[0]
    y = torch.empty(rows, n_out, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(rows, BLOCK["BLOCK_M"]), triton.cdiv(n_out, BLOCK["BLOCK_N"]))
    zp = zero_point if zero_point is not None else packed
    kernels["w4a16"][grid](
        x, packed, scale, zp, y, rows, n_out, width,
        x.stride(0), packed.stride(0), scale.stride(0), y.stride(0),
        GROUP=group_size, HAS_ZP=zero_point is not None, PRECISION=_precision(x), **BLOCK,
    )  # fmt: skip
    return y


def fp8_matmul(
    x: torch.Tensor, weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int]
) -> torch.Tensor:
    """x [M, K] @ W.T for float8_e4m3fn `weight` [N, K] and `scale_inv` [ceil(N/B0), ceil(K/B1)]."""
    triton, kernels = _kernels()
    x = x.contiguous()
    rows, width = x.shape
    n_out = weight.shape[0]
    codes = weight.view(torch.uint8)
    y = torch.empty(rows, n_out, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(rows, BLOCK["BLOCK_M"]), triton.cdiv(n_out, BLOCK["BLOCK_N"]))
    kernels["fp8"][grid](
        x, codes, scale_inv, y, rows, n_out, width,
        x.stride(0), codes.stride(0), scale_inv.stride(0), y.stride(0),
        B0=block[0], B1=block[1], PRECISION=_precision(x), **BLOCK,
    )  # fmt: skip
    return y


def nf4_matmul(
    x: torch.Tensor,
    packed: torch.Tensor,
    absmax: torch.Tensor,
    table: torch.Tensor,
    blocksize: int,
    n_out: int,
) -> torch.Tensor:
    """x [M, K] @ W.T for bitsandbytes' flat 4-bit `packed` codes, fp32 block `absmax` and the
    16-entry code `table` (NF4 or FP4)."""
    triton, kernels = _kernels()
    x = x.contiguous()
    rows, width = x.shape
    y = torch.empty(rows, n_out, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(rows, BLOCK["BLOCK_M"]), triton.cdiv(n_out, BLOCK["BLOCK_N"]))
    kernels["nf4"][grid](
        x, packed.reshape(-1), absmax, table, y, rows, n_out, width, x.stride(0), y.stride(0),
        BLOCKSIZE=blocksize, PRECISION=_precision(x), **BLOCK,
    )  # fmt: skip
    return y


def _precision(x: torch.Tensor) -> str:
    """fp32 activations get full fp32 products (a GPU would otherwise round them to tf32)."""
    return "ieee" if x.dtype == torch.float32 else "tf32"
