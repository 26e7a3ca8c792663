"""numba kernels that multiply activations by table-coded weights (FP8 blocks, NF4/FP4 nibbles).

Both compute y[m, n] = sum over scale blocks b of s_b * (sum_{k in b} x[m, k] * table[code[n, k]])
in float32: for each output row n and block b the block's codes are looked up once into a small
buffer, then dotted with every activation row. With one activation row (decode of a single
sequence) the weight is read once, at 1 byte (FP8) or half a byte (4-bit) per element; with more
rows four output rows are done together, so each activation element loaded serves four sums.

`fastmath` lets LLVM vectorise the dot products (it reassociates the sums); the order is fixed by
the compiled code, the same for every call. The kernels are compiled on first use and cached on
disk (`cache=True`).
"""

from __future__ import annotations

import numba
import numpy as np

_JIT = dict(nogil=True, fastmath=True, cache=True, boundscheck=False)


@numba.njit(**_JIT)
def _fp8_block_codes(codes_row, table, k0, length, buffer):
    for k in range(length):
        buffer[k] = table[codes_row[k0 + k]]


@numba.njit(**_JIT)
def fp8_block_matmul(x, codes, scales, table, b0, b1, out):
    """out[M, N] = x[M, K] @ W.T with W[n, k] = table[codes[n, k]] * scales[n // b0, k // b1]."""
    rows, width = x.shape
    n_out = codes.shape[0]
    n_blocks = (width + b1 - 1) // b1
    t0 = np.empty(b1, np.float32)
    t1 = np.empty(b1, np.float32)
    t2 = np.empty(b1, np.float32)
    t3 = np.empty(b1, np.float32)
    start = 0
    if rows > 1:  # four output rows at a time
        start = n_out - n_out % 4
        for n in range(0, start, 4):
            for m in range(rows):
                out[m, n] = 0.0
                out[m, n + 1] = 0.0
                out[m, n + 2] = 0.0
                out[m, n + 3] = 0.0
            for b in range(n_blocks):
                k0 = b * b1
                length = min(width, k0 + b1) - k0
                _fp8_block_codes(codes[n], table, k0, length, t0)
                _fp8_block_codes(codes[n + 1], table, k0, length, t1)
                _fp8_block_codes(codes[n + 2], table, k0, length, t2)
                _fp8_block_codes(codes[n + 3], table, k0, length, t3)
                s0 = scales[n // b0, b]
                s1 = scales[(n + 1) // b0, b]
                s2 = scales[(n + 2) // b0, b]
                s3 = scales[(n + 3) // b0, b]
                for m in range(rows):
                    a0 = np.float32(0.0)
                    a1 = np.float32(0.0)
                    a2 = np.float32(0.0)
                    a3 = np.float32(0.0)
                    for k in range(length):
                        v = x[m, k0 + k]
                        a0 += v * t0[k]
                        a1 += v * t1[k]
                        a2 += v * t2[k]
                        a3 += v * t3[k]
                    out[m, n] += a0 * s0
                    out[m, n + 1] += a1 * s1
                    out[m, n + 2] += a2 * s2
                    out[m, n + 3] += a3 * s3
    for n in range(start, n_out):
        for m in range(rows):
            out[m, n] = 0.0
        for b in range(n_blocks):
            k0 = b * b1
            length = min(width, k0 + b1) - k0
            _fp8_block_codes(codes[n], table, k0, length, t0)
            s = scales[n // b0, b]
            for m in range(rows):
                acc = np.float32(0.0)
                for k in range(length):
                    acc += x[m, k0 + k] * t0[k]
                out[m, n] += acc * s


@numba.njit(**_JIT)
def _nibble_codes(codes, table, e0, length, buffer):
    """buffer[:length] = table of the 4-bit codes of flat elements e0 .. e0+length (e0, length even);
    byte i holds element 2i in its high nibble and 2i+1 in its low nibble."""
    first = e0 // 2
    for i in range(length // 2):
        byte = codes[first + i]
        buffer[2 * i] = table[byte >> 4]
        buffer[2 * i + 1] = table[byte & 15]


@numba.njit(**_JIT)
def nibble_matmul(x, codes, absmax, table, blocksize, out):
    """out[M, N] = x[M, K] @ W.T with W = (table[code[e]] * absmax[e // blocksize]) over the
    row-major flat index e = n * K + k (K and blocksize even, so no block starts mid-byte)."""
    rows, width = x.shape
    n_out = out.shape[1]
    buffer = np.empty(blocksize, np.float32)
    for n in range(n_out):
        for m in range(rows):
            out[m, n] = 0.0
        e = n * width
        end = e + width
        while e < end:
            block = e // blocksize
            stop = min(end, (block + 1) * blocksize)
            length = stop - e
            _nibble_codes(codes, table, e, length, buffer)
            s = absmax[block]
            k0 = e - n * width
            for m in range(rows):
                acc = np.float32(0.0)
                for k in range(length):
                    acc += x[m, k0 + k] * buffer[k]
                out[m, n] += acc * s
            e = stop
