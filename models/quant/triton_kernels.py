"""Triton weight-only matmul kernels for the three formats, reading each checkpoint's own layout.

Each program computes one [BLOCK_M, BLOCK_N] tile of y = x @ W.T over one range of K: for every
BLOCK_K slice it loads the activations, loads and decodes the matching weight codes in registers
into the activations' dtype (the same rounding as the exact path's dequantisation followed by a
cast), and accumulates `tl.dot` in fp32. The weight is read once per tile column at its stored
size: 0.5 byte (int4, NF4) or 1 byte (FP8) per element, never written back in full precision.

- `w4a16_matmul`: compressed-tensors int32 words, 8 fields per word, column j in bits
  4*(j % 8); W = (f - 8 - zp) * s, with per-group scales s [N, K/G] and signed zero points.
- `fp8_matmul`: float8_e4m3fn weights read as bytes and decoded by bit arithmetic (e4m3 magnitude
  bits shifted into a float16, times 256: exact, and portable to GPUs without FP8 units); W =
  fp32(code) * scale_inv[n // B0, k // B1].
- `nf4_matmul`: bitsandbytes' flat packing, element e = n*K + k in byte e // 2, high nibble
  first; W = table[code] * absmax[e // blocksize].
- `dense_matmul`: a plain [N, K] weight (any float dtype), cast to the activations' dtype: the
  same tile loop for an unquantised linear (the engine's batch-invariant products,
  engine/invariant/cuda/products.py).

The tile is a fixed rule of (M, N, K), `tile_for` (no autotuning: it would be slow under the
interpreter and could choose differently run to run): BLOCK_M 16/32/64 by rows, BLOCK_N 64 (128
for very wide layers), and, where N gives too few column tiles for the GPU (decode), split-K: up
to 8 K ranges, each writing fp32 partial sums that are added in a fixed order and rounded once.
BLOCK_N and the split depend on N and K only (`columns`). A caller may give its own `Tile`
(the engine's batch-invariant plan fixes BLOCK_M too). The row count is not a specialised
argument (`do_not_specialize`): one compiled kernel per tile, whatever M. Masks cover partial
tiles on every side. Triton is imported lazily (the `gpu` extra); with `TRITON_INTERPRET=1` the
same kernels run on CPU tensors, at every tile class `tile_for` returns, which is how CI tests
them, in fp32 and fp16 (bf16 activations give wrong numbers under Triton 3.9's interpreter, seen
with the FP8 kernel, so bf16 is left to the self-check and `benchmarks/gpu_check.py --only
quant` and `--only invariant` on a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch


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

    # The parts every kernel shares: where its tile lies, the activations and weight mask of one
    # K slice, and the store of the finished tile (into its split's slice of the workspace). They
    # are module names, not locals: TRITON_INTERPRET=1 runs a kernel from its source in the
    # module's globals, without this function's closure.
    global _tile_start, _k_slice, _store_tile

    @triton.jit
    def _tile_start(BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, K_PER):
        offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        return offs_m, offs_n, tl.program_id(2) * K_PER, acc

    @triton.jit
    def _k_slice(x_ptr, k0, offs_m, offs_n, M, N, K, stride_xm, BLOCK_K: tl.constexpr):
        k = k0 + tl.arange(0, BLOCK_K)
        x_mask = (offs_m[:, None] < M) & (k[None, :] < K)
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :], mask=x_mask, other=0.0)
        return k, x, (offs_n[:, None] < N) & (k[None, :] < K)

    @triton.jit
    def _store_tile(y_ptr, acc, offs_m, offs_n, M, N, stride_ym, stride_ys):
        y_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        y_at = y_ptr + tl.program_id(2) * stride_ys + offs_m[:, None] * stride_ym + offs_n[None, :]
        tl.store(y_at, acc.to(y_ptr.dtype.element_ty), mask=y_mask)

    @triton.jit(do_not_specialize=["M"])
    def dense(
        x_ptr, w_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym, stride_ys, K_PER,
        PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ):  # fmt: skip
        offs_m, offs_n, k_start, acc = _tile_start(BLOCK_M, BLOCK_N, K_PER)
        for k0 in range(k_start, tl.minimum(k_start + K_PER, K), BLOCK_K):
            k, x, w_mask = _k_slice(x_ptr, k0, offs_m, offs_n, M, N, K, stride_xm, BLOCK_K)
            w = tl.load(w_ptr + offs_n[:, None] * stride_wn + k[None, :], mask=w_mask, other=0.0)
            acc += tl.dot(x, tl.trans(w.to(x.dtype)), input_precision=PRECISION)
        _store_tile(y_ptr, acc, offs_m, offs_n, M, N, stride_ym, stride_ys)

    @triton.jit(do_not_specialize=["M"])
    def w4a16(
        x_ptr, w_ptr, s_ptr, zp_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_sn, stride_ym, stride_ys, K_PER,
        GROUP: tl.constexpr, HAS_ZP: tl.constexpr, PRECISION: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ):  # fmt: skip
        offs_m, offs_n, k_start, acc = _tile_start(BLOCK_M, BLOCK_N, K_PER)
        for k0 in range(k_start, tl.minimum(k_start + K_PER, K), BLOCK_K):
            k, x, w_mask = _k_slice(x_ptr, k0, offs_m, offs_n, M, N, K, stride_xm, BLOCK_K)
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
        _store_tile(y_ptr, acc, offs_m, offs_n, M, N, stride_ym, stride_ys)

    @triton.jit(do_not_specialize=["M"])
    def fp8(
        x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_sn, stride_ym, stride_ys, K_PER,
        B0: tl.constexpr, B1: tl.constexpr, PRECISION: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ):  # fmt: skip
        offs_m, offs_n, k_start, acc = _tile_start(BLOCK_M, BLOCK_N, K_PER)
        for k0 in range(k_start, tl.minimum(k_start + K_PER, K), BLOCK_K):
            k, x, w_mask = _k_slice(x_ptr, k0, offs_m, offs_n, M, N, K, stride_xm, BLOCK_K)
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
        _store_tile(y_ptr, acc, offs_m, offs_n, M, N, stride_ym, stride_ys)

    @triton.jit(do_not_specialize=["M"])
    def nf4(
        x_ptr, w_ptr, absmax_ptr, table_ptr, y_ptr, M, N, K, stride_xm, stride_ym, stride_ys, K_PER,
        BLOCKSIZE: tl.constexpr, PRECISION: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ):  # fmt: skip
        offs_m, offs_n, k_start, acc = _tile_start(BLOCK_M, BLOCK_N, K_PER)
        for k0 in range(k_start, tl.minimum(k_start + K_PER, K), BLOCK_K):
            k, x, w_mask = _k_slice(x_ptr, k0, offs_m, offs_n, M, N, K, stride_xm, BLOCK_K)
            e = offs_n[:, None].to(tl.int64) * K + k[None, :]
            byte = tl.load(w_ptr + e // 2, mask=w_mask, other=0).to(tl.int32)
            code = tl.where(e % 2 == 0, byte >> 4, byte & 0xF)
            value = tl.load(table_ptr + code, mask=w_mask, other=0.0)
            scale = tl.load(absmax_ptr + e // BLOCKSIZE, mask=w_mask, other=0.0)
            w = (value * scale).to(x.dtype)
            acc += tl.dot(x, tl.trans(w), input_precision=PRECISION)
        _store_tile(y_ptr, acc, offs_m, offs_n, M, N, stride_ym, stride_ys)

    return triton, {"dense": dense, "w4a16": w4a16, "fp8": fp8, "nf4": nf4}


@dataclass(frozen=True)
class Tile:
    """One launch shape: a [BLOCK_M, BLOCK_N] output tile per program, K in BLOCK_K slices, and
    K cut into SPLIT_K ranges (one program each) whose fp32 partial sums are added in order."""

    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    SPLIT_K: int

    @property
    def name(self) -> str:
        return f"{self.BLOCK_M}x{self.BLOCK_N}x{self.BLOCK_K}" + (
            f"/split{self.SPLIT_K}" if self.SPLIT_K > 1 else ""
        )


TARGET_PROGRAMS = 132  # an H100's or H200's SMs: fill them once at decode
BLOCK_K = 64
WIDE_N = 2 * TARGET_PROGRAMS * 64  # from here 64-wide tiles give two waves: take 128


def tile_for(rows: int, n_out: int, width: int) -> Tile:
    """The tile for y[rows, n_out] = x @ W.T with K = `width`: fixed rules, no autotuning (which
    would be slow under the interpreter and could pick differently run to run). BLOCK_M follows
    the rows (16 up to 16, 32 up to 32, then 64); the rest is `columns`."""
    block_m = 16 if rows <= 16 else 32 if rows <= 32 else 64
    return Tile(block_m, *columns(n_out, width))


def columns(n_out: int, width: int) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, SPLIT_K) for an [n_out, width] weight: N and K only, so a row's sums are
    cut the same way whatever the batch. BLOCK_N is 128 only for very wide layers; SPLIT_K
    doubles (to 8) while the column tiles times the splits stay within one wave of
    `TARGET_PROGRAMS` (a constant, not the device's count) and each split keeps at least two K
    slices, which is where decode (a few column tiles over a long K) needs more programs than
    columns give."""
    block_n = 128 if n_out >= WIDE_N else 64
    column_tiles = _cdiv(n_out, block_n)
    k_slices = _cdiv(width, BLOCK_K)
    split = 1
    while split < 8 and column_tiles * split * 2 <= TARGET_PROGRAMS and k_slices >= 4 * split:
        split *= 2
    return block_n, BLOCK_K, split


def _launch(kernel, x, n_out: int, weight_args: tuple, strides: tuple, meta: dict, tile=None):
    """Run `kernel` over the grid of `tile` (default `tile_for`); with SPLIT_K > 1 each K range
    writes fp32 partial sums to its own slice of a workspace, added here in a fixed order (so the
    result is the same run to run), then rounded once to the activations' dtype."""
    triton, _ = _kernels()
    rows, width = x.shape
    tile = tile or tile_for(rows, n_out, width)
    k_per = _cdiv(_cdiv(width, tile.SPLIT_K), tile.BLOCK_K) * tile.BLOCK_K
    split = _cdiv(width, k_per)  # the ranges that are not empty
    if split == 1:
        out = torch.empty(rows, n_out, dtype=x.dtype, device=x.device)
        stride_s = 0
    else:
        out = torch.empty(split, rows, n_out, dtype=torch.float32, device=x.device)
        stride_s = out.stride(0)
    grid = (triton.cdiv(rows, tile.BLOCK_M), triton.cdiv(n_out, tile.BLOCK_N), split)
    kernel[grid](
        x, *weight_args, out, rows, n_out, width, *strides, out.stride(-2), stride_s, k_per,
        PRECISION=_precision(x), BLOCK_M=tile.BLOCK_M, BLOCK_N=tile.BLOCK_N,
        BLOCK_K=tile.BLOCK_K, **meta,
    )  # fmt: skip
    if split == 1:
        return out
    total = out[0].clone()
    for part in out[1:]:  # in order: the same sum every run
        total += part
    return total.to(x.dtype)


def dense_matmul(x: torch.Tensor, weight: torch.Tensor, tile: Tile | None = None) -> torch.Tensor:
    """x [M, K] @ weight.T for a float `weight` [N, K] (bf16, fp16 or fp32; cast to x's dtype in
    registers, as `F.linear` on a weight of x's dtype)."""
    _, kernels = _kernels()
    x = x.contiguous()
    weight = weight if weight.stride(-1) == 1 else weight.contiguous()
    return _launch(
        kernels["dense"], x, weight.shape[0], (weight,), (x.stride(0), weight.stride(0)), {}, tile
    )


def w4a16_matmul(
    x: torch.Tensor,
    packed: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    group_size: int,
    tile: Tile | None = None,
) -> torch.Tensor:
    """x [M, K] @ W.T for compressed-tensors int32 `packed` [N, K/8], `scale` [N, K/G] and signed
    `zero_point` [N, K/G] (any integer dtype; None: symmetric)."""
    _, kernels = _kernels()
    x = x.contiguous()
    zp = zero_point if zero_point is not None else packed
    return _launch(
        kernels["w4a16"], x, packed.shape[0], (packed, scale, zp),
        (x.stride(0), packed.stride(0), scale.stride(0)),
        dict(GROUP=group_size, HAS_ZP=zero_point is not None), tile,
    )  # fmt: skip


def fp8_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    scale_inv: torch.Tensor,
    block: tuple[int, int],
    tile: Tile | None = None,
) -> torch.Tensor:
    """x [M, K] @ W.T for float8_e4m3fn `weight` [N, K] and `scale_inv` [ceil(N/B0), ceil(K/B1)]."""
    _, kernels = _kernels()
    x = x.contiguous()
    codes = weight.view(torch.uint8)
    return _launch(
        kernels["fp8"], x, weight.shape[0], (codes, scale_inv),
        (x.stride(0), codes.stride(0), scale_inv.stride(0)), dict(B0=block[0], B1=block[1]), tile,
    )  # fmt: skip


def nf4_matmul(
    x: torch.Tensor,
    packed: torch.Tensor,
    absmax: torch.Tensor,
    table: torch.Tensor,
    blocksize: int,
    n_out: int,
    tile: Tile | None = None,
) -> torch.Tensor:
    """x [M, K] @ W.T for bitsandbytes' flat 4-bit `packed` codes, fp32 block `absmax` and the
    16-entry code `table` (NF4 or FP4)."""
    _, kernels = _kernels()
    x = x.contiguous()
    return _launch(
        kernels["nf4"], x, n_out, (packed.reshape(-1), absmax, table), (x.stride(0),),
        dict(BLOCKSIZE=blocksize), tile,
    )  # fmt: skip


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _precision(x: torch.Tensor) -> str:
    """fp32 activations get full fp32 products (a GPU would otherwise round them to tf32)."""
    return "ieee" if x.dtype == torch.float32 else "tf32"
