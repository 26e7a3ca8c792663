"""Batch-invariant CPU matrix products: every row computed in an order fixed by that row alone.

A library GEMM picks its code path and its split of the sum over K by the shape of the call, and
on CPU nothing in MKL documents that a row's result stays the same when the number of rows M
changes: measured (benchmarks/kernel_branches.py, RESULTS.md), a row of `F.linear` changes bits
with M under MKL's AVX2 branch for 55 of 64 values of M, under COMPATIBLE for 49, and even on
this machine's own AVX-512 branch below 16 rows. So the rows a step computes must not decide
how any one of them is summed.

The construction: every product runs as calls of exactly `TILE_ROWS` rows (the last tile padded
with zero rows), batched through `torch.bmm` over the tiles, so that the kernel only ever sees
one shape per weight, `[TILE_ROWS, K] x [K, N_slice]`, whatever M is. Wide weights (the LM head)
run in column slices of `SLICE_COLUMNS`, fixed by the weight's shape alone (a slice's weight
stays in cache across the tiles). What is left is where a row sits inside its tile; measured,
16-row tiles keep a row's bits at every position under every MKL branch (COMPATIBLE, SSE4_2,
AVX, AVX2, AVX512) and at 1, 2 and 4 threads, while 8-row tiles do not under AVX2 and 32-row
tiles do not under AVX2 either. That is a property of the library's kernel, not of this code,
so the engine checks it on the machine it runs on (`engine/invariance_check.py`) before it relies
on it.

`invariant_products()` routes `torch.nn.functional.linear` (every `nn.Linear`, the LM head, the
exact path of the quantised linears) through `linear` for its duration; `in_row_tiles` is what a
quantised layer's fused kernel runs in (models/quant/compute.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

TILE_ROWS = 16
SLICE_COLUMNS = 4096  # columns per call of a wide weight; fixed per weight shape
_torch_linear = torch.nn.functional.linear  # the library's own, called for what is not ours


def tiled_matmul(x: torch.Tensor, weight_t: torch.Tensor) -> torch.Tensor:
    """`x @ weight_t` for x [M, K] and weight_t [K, N] (any strides) in fixed 16-row tiles."""
    m, k = x.shape
    n = weight_t.shape[1]
    tiles = -(-m // TILE_ROWS)
    padded = tiles * TILE_ROWS
    if padded != m:
        x = F.pad(x, (0, 0, 0, padded - m))
    xt = x.contiguous().view(tiles, TILE_ROWS, k)
    if n <= SLICE_COLUMNS:
        out = torch.bmm(xt, weight_t.expand(tiles, k, n))
    else:
        out = x.new_empty(tiles, TILE_ROWS, n)
        for s0 in range(0, n, SLICE_COLUMNS):
            part = weight_t[:, s0 : s0 + SLICE_COLUMNS]
            out[:, :, s0 : s0 + part.shape[1]] = torch.bmm(xt, part.expand(tiles, k, part.shape[1]))
    return out.view(padded, n)[:m]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear` in fixed row tiles (module docstring); CUDA and integer inputs go to torch's own."""
    if x.device.type != "cpu" or not x.is_floating_point() or x.dim() == 0 or weight.dim() != 2:
        return _torch_linear(x, weight, bias)
    flat = x.reshape(-1, x.shape[-1])
    out = tiled_matmul(flat, weight.t())
    if bias is not None:
        out = out + bias
    return out.view(*x.shape[:-1], weight.shape[0])


def in_row_tiles(run: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """`run(x)` for x [M, K], called on exact 16-row tiles (zero-padded), so that a kernel with
    its own blocking by rows sees one shape whatever M is."""
    m = x.shape[0]
    if m == TILE_ROWS:
        return run(x)
    padded = -(-m // TILE_ROWS) * TILE_ROWS
    if padded != m:
        x = F.pad(x, (0, 0, 0, padded - m))
    outs = [run(x[t : t + TILE_ROWS]) for t in range(0, padded, TILE_ROWS)]
    return torch.cat(outs)[:m]


@contextmanager
def invariant_products() -> Iterator[None]:
    """Route `torch.nn.functional.linear` through `linear`, on one torch thread, for the duration.

    `nn.Linear.forward` looks `F.linear` up when it runs, so this reaches every linear of an HF
    model, with no change to the model. One thread, because a library GEMM run on several
    threads splits its work by the shape and the thread count: measured under MKL's AVX2 branch
    at 2 threads, a 16-row tile of [16, 128] x [128, 64] changes a row's bits with its position,
    and so do the attention kernel's GEMMs. On one thread every call is one sequential kernel,
    so the records do not depend on the thread count either; the cores are used by running
    several single-threaded workers (splice/run/workers.py). Not thread-safe: one forward at a
    time per process, as the engine runs them. Re-entrant."""
    if torch.nn.functional.linear is linear:
        yield
        return
    threads = torch.get_num_threads()
    torch.nn.functional.linear = linear
    if threads != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.nn.functional.linear = _torch_linear
        if threads != 1:
            torch.set_num_threads(threads)
