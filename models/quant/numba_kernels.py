"""fp32 CPU kernels that multiply activations by quantised weights read as they are stored.

One kernel shape serves the three formats: out[m, n] = sum_k x[m, k] * W[n, k], with W decoded
32 weights at a time (a *chunk*) into two 16-lane float32 vectors, straight from the checkpoint's
bytes, by the format's decoder:

- W4A16 (compressed-tensors `weight_packed`, read as bytes: byte j of a row holds input column
  2j in its low nibble and 2j+1 in its high nibble): W = (f - z) * s, f the 4-bit field, z = 8
  (symmetric) or 8 + the zero point, s the group's scale (groups are whole chunks);
- NF4 / FP4 (bitsandbytes' flat codes, two per byte, the even element in the high nibble):
  W = table[code] * absmax of the code's block, the 16-entry table looked up in registers
  (`simd.vlookup16`, one `vpermps` on AVX-512);
- FP8 e4m3 128x128 blocks (one byte per weight, row-major): W = e4m3(b) * s, decoded
  arithmetically (`simd.vload_e4m3`, value / 256, the 256 folded into the block scale).

The 4-bit formats pair adjacent columns in a byte, so the activations are reordered once per
call (`pairs`): in each chunk the 16 even columns first, then the 16 odd ones, matching the
low and high nibbles' lanes. Each decoded weight is exactly the value the format's library
dequantises to (the same float32 products, rounded like the library to the weight's dtype and
then the activations' dtype: `rounding`, see `_rounded`), so the only difference from the exact
path is the order of the float32 sums:

    per row: lo = fma(x[k:k+16], W[k:k+16], lo), hi = fma(x[k+16:k+32], W[k+16:k+32], hi)
    over the chunks k = 0, 32, ... in order; out = vsum(lo + hi) (pairwise, fixed).

No fast-math flag is used anywhere: LLVM may not reorder these sums. The order is the same for a
row computed alone (`_one_row`, two outputs per pass) or in a tile of six rows (`_six_rows`: each
decoded chunk serves six rows, twelve accumulators), so a row's result does not depend on the
batch it is in. The kernels run on one thread (`nogil`; threads are the engine's business), and
are compiled on first use and cached on disk (`cache=True`, per CPU): seconds per kernel the
first time, a fraction of that for all four from the cache.
"""

from __future__ import annotations

import numba
import numpy as np

from nudgeability.models.quant.simd import (
    FAST_LOOKUP,
    vadd,
    vfloat,
    vfma,
    vhigh4,
    vlanes,
    vload,
    vload_bytes,
    vload_e4m3,
    vlookup16,
    vlow4,
    vmul,
    vround_bf16,
    vround_f16,
    vsplat,
    vsub,
    vsum,
    vzeros,
)

_JIT = dict(nogil=True, cache=True, boundscheck=False)  # no fastmath: the code fixes every rounding
CHUNK = 32  # weights decoded per step; in_features and group sizes must be multiples
TILE = 6  # activation rows per pass above one row
ROUND_NONE, ROUND_BF16, ROUND_F16 = 0, 1, 2


def rounding_code(*dtypes: str) -> int:
    """The `rounding` argument for rounding a float32 weight to each of `dtypes` in turn
    ("float32", "bfloat16", "float16"; at most two count): first + 4 * second."""
    codes = {"float32": ROUND_NONE, "bfloat16": ROUND_BF16, "float16": ROUND_F16}
    steps = [codes[d] for d in dtypes if codes[d] != ROUND_NONE]
    steps = [s for i, s in enumerate(steps) if i == 0 or s != steps[i - 1]][:2]
    return sum(s * 4**i for i, s in enumerate(steps))


@numba.njit(inline="always")
def _round_once(w, code):
    if code == ROUND_BF16:
        return vround_bf16(w)
    if code == ROUND_F16:
        return vround_f16(w)
    return w


@numba.njit(inline="always")
def _rounded(w, rounding):
    """The weight's roundings as the exact path applies them: to the dtype the library
    dequantises in, then to the activations' dtype (`rounding_code`)."""
    if rounding == 0:
        return w
    return _round_once(_round_once(w, rounding % 4), rounding // 4)


@numba.njit(inline="always")
def _fields_minus(b, z):
    """(f - z) as float32 for the low and high nibble fields f of the bytes b: exact small
    integers either way; a 16-entry lookup of 0..15 - z where that is one instruction (AVX-512:
    measured faster at one row), else a conversion and a subtraction."""
    if FAST_LOOKUP:
        levels = vsub(vlanes(), z)
        return vlookup16(levels, vlow4(b)), vlookup16(levels, vhigh4(b))
    return vsub(vfloat(vlow4(b)), z), vsub(vfloat(vhigh4(b)), z)


@numba.njit(inline="always")
def _w4_symmetric(p, n, c):
    packed, scale, group, rounding = p
    s = vsplat(scale[n, group[c]])
    lo, hi = _fields_minus(vload_bytes(packed[n], 16 * c), vsplat(8.0))
    return _rounded(vmul(lo, s), rounding), _rounded(vmul(hi, s), rounding)


@numba.njit(inline="always")
def _w4_zero_point(p, n, c):
    packed, scale, zero, group, rounding = p
    g = group[c]
    s = vsplat(scale[n, g])
    lo, hi = _fields_minus(vload_bytes(packed[n], 16 * c), vsplat(zero[n, g]))
    return _rounded(vmul(lo, s), rounding), _rounded(vmul(hi, s), rounding)


@numba.njit(inline="always")
def _nibble_table(p, n, c):
    codes, absmax, table, width, block_shift, rounding = p
    e = n * width + CHUNK * c  # flat element index, as bitsandbytes counts blocks
    a = vsplat(absmax[e >> block_shift])
    b = vload_bytes(codes, e >> 1)
    levels = vload(table, 0)
    even = vmul(vlookup16(levels, vhigh4(b)), a)
    odd = vmul(vlookup16(levels, vlow4(b)), a)
    return _rounded(even, rounding), _rounded(odd, rounding)


@numba.njit(inline="always")
def _fp8_blocks(p, n, c):
    weight, scale, row_block, half_block, rounding = p
    row = weight[n]
    s = scale[n // row_block]
    lo = vmul(vload_e4m3(row, CHUNK * c), vsplat(s[half_block[2 * c]]))
    hi = vmul(vload_e4m3(row, CHUNK * c + 16), vsplat(s[half_block[2 * c + 1]]))
    return _rounded(lo, rounding), _rounded(hi, rounding)


@numba.njit(inline="always")
def _one_row(decode, p, x, out, n_out, chunks):
    """out[0, :] for one activation row, two outputs per pass (four independent sums)."""
    x0 = x[0]
    paired = n_out - n_out % 2
    for n in range(0, paired, 2):
        lo0 = vzeros()
        hi0 = vzeros()
        lo1 = vzeros()
        hi1 = vzeros()
        for c in range(chunks):
            xl = vload(x0, CHUNK * c)
            xh = vload(x0, CHUNK * c + 16)
            w_lo, w_hi = decode(p, n, c)
            lo0 = vfma(xl, w_lo, lo0)
            hi0 = vfma(xh, w_hi, hi0)
            w_lo, w_hi = decode(p, n + 1, c)
            lo1 = vfma(xl, w_lo, lo1)
            hi1 = vfma(xh, w_hi, hi1)
        out[0, n] = vsum(vadd(lo0, hi0))
        out[0, n + 1] = vsum(vadd(lo1, hi1))
    for n in range(paired, n_out):
        lo0 = vzeros()
        hi0 = vzeros()
        for c in range(chunks):
            w_lo, w_hi = decode(p, n, c)
            lo0 = vfma(vload(x0, CHUNK * c), w_lo, lo0)
            hi0 = vfma(vload(x0, CHUNK * c + 16), w_hi, hi0)
        out[0, n] = vsum(vadd(lo0, hi0))


@numba.njit(inline="always")
def _six_rows(decode, p, x, out, n_out, chunks, rows):
    """out[:rows] with x padded to a multiple of six rows: each decoded chunk serves six rows."""
    for m in range(0, rows, TILE):
        x0, x1, x2, x3, x4, x5 = x[m], x[m + 1], x[m + 2], x[m + 3], x[m + 4], x[m + 5]
        for n in range(n_out):
            lo0, lo1, lo2, lo3, lo4, lo5 = (
                vzeros(),
                vzeros(),
                vzeros(),
                vzeros(),
                vzeros(),
                vzeros(),
            )
            hi0, hi1, hi2, hi3, hi4, hi5 = (
                vzeros(),
                vzeros(),
                vzeros(),
                vzeros(),
                vzeros(),
                vzeros(),
            )
            for c in range(chunks):
                w_lo, w_hi = decode(p, n, c)
                k = CHUNK * c
                lo0 = vfma(vload(x0, k), w_lo, lo0)
                hi0 = vfma(vload(x0, k + 16), w_hi, hi0)
                lo1 = vfma(vload(x1, k), w_lo, lo1)
                hi1 = vfma(vload(x1, k + 16), w_hi, hi1)
                lo2 = vfma(vload(x2, k), w_lo, lo2)
                hi2 = vfma(vload(x2, k + 16), w_hi, hi2)
                lo3 = vfma(vload(x3, k), w_lo, lo3)
                hi3 = vfma(vload(x3, k + 16), w_hi, hi3)
                lo4 = vfma(vload(x4, k), w_lo, lo4)
                hi4 = vfma(vload(x4, k + 16), w_hi, hi4)
                lo5 = vfma(vload(x5, k), w_lo, lo5)
                hi5 = vfma(vload(x5, k + 16), w_hi, hi5)
            left = rows - m
            out[m, n] = vsum(vadd(lo0, hi0))
            if left > 1:
                out[m + 1, n] = vsum(vadd(lo1, hi1))
            if left > 2:
                out[m + 2, n] = vsum(vadd(lo2, hi2))
            if left > 3:
                out[m + 3, n] = vsum(vadd(lo3, hi3))
            if left > 4:
                out[m + 4, n] = vsum(vadd(lo4, hi4))
            if left > 5:
                out[m + 5, n] = vsum(vadd(lo5, hi5))


@numba.njit(inline="always")
def _prepared(x, pairs):
    """x as the kernels read it: float32 rows padded with zero rows to a multiple of `TILE`
    (one row stays one), and with `pairs` each chunk's even columns before its odd ones."""
    rows, width = x.shape
    padded = 1 if rows == 1 else (rows + TILE - 1) // TILE * TILE
    xp = np.zeros((padded, width), np.float32)
    for m in range(rows):
        if pairs:
            for c in range(width // CHUNK):
                for j in range(16):
                    xp[m, CHUNK * c + j] = x[m, CHUNK * c + 2 * j]
                    xp[m, CHUNK * c + 16 + j] = x[m, CHUNK * c + 2 * j + 1]
        else:
            xp[m] = x[m]
    return xp


@numba.njit(inline="always")
def _matmul(decode, p, x, out, pairs):
    rows, width = x.shape
    xp = _prepared(x, pairs)
    if rows == 1:
        _one_row(decode, p, xp, out, out.shape[1], width // CHUNK)
    else:
        _six_rows(decode, p, xp, out, out.shape[1], width // CHUNK, rows)


@numba.njit(**_JIT)
def w4_symmetric_matmul(x, packed, scale, group, rounding, out):
    """out = x @ W.T, W[n, k] = (f - 8) * scale[n, group[k // 32]], f the 4-bit field of column k
    in packed[n] (compressed-tensors' int32 words read as bytes)."""
    _matmul(_w4_symmetric, (packed, scale, group, rounding), x, out, True)


@numba.njit(**_JIT)
def w4_zero_point_matmul(x, packed, scale, zero, group, rounding, out):
    """As `w4_symmetric_matmul` with W[n, k] = (f - zero[n, g]) * scale[n, g] (zero = 8 + the
    checkpoint's zero point)."""
    _matmul(_w4_zero_point, (packed, scale, zero, group, rounding), x, out, True)


@numba.njit(**_JIT)
def nibble_table_matmul(x, codes, absmax, table, block_shift, rounding, out):
    """out = x @ W.T, W.flat[e] = table[code e] * absmax[e >> block_shift] (bitsandbytes' 4-bit
    layout: flat codes, the even element in each byte's high nibble)."""
    _matmul(_nibble_table, (codes, absmax, table, x.shape[1], block_shift, rounding), x, out, True)


@numba.njit(**_JIT)
def fp8_block_matmul(x, weight, scale, row_block, half_block, rounding, out):
    """out = x @ W.T, W[n, k] = e4m3(weight[n, k]) / 256 * scale[n // row_block, half_block[k // 16]]
    (the scales pre-multiplied by 256)."""
    _matmul(_fp8_blocks, (weight, scale, row_block, half_block, rounding), x, out, False)
