"""Batch-invariant CPU matrix products: every row computed in an order fixed by that row alone.

A library GEMM picks its code path and its split of the sum over K by the shape of the call, and
on CPU nothing in MKL or oneDNN documents that a row's result stays the same when the number of
rows M changes; measured, it does not (a row of `F.linear` changes bits with M on several of
MKL's code branches, and on an AVX-512 branch below 16 rows). So the rows a step computes must
not decide how any one of them is summed.

The construction: every product runs as calls of exactly `TILE_ROWS` rows (the last tile padded
with zero rows), so that the kernel only ever sees one shape per weight, `[TILE_ROWS, K] x
[K, N_slice]`, whatever M is. An fp32 product calls oneDNN's matmul once per tile (the op
inductor calls for a packed CPU linear, `torch.ops.mkldnn._linear_pointwise`; the model's
weights up to REORDER_MAX_COLUMNS wide reordered once into its blocked layout and kept, cpu/weights.py,
or, in a run that owns its model, cpu/reordered.py), which is faster than MKL's GEMM at these
shapes. Other dtypes go through `torch.bmm` over the tiles. Weights run in column slices fixed
by their shape alone (`weights.column_slices`): wide ones (the LM head) in slices of `SLICE_COLUMNS` (a
slice's weight stays in cache across the tiles), others of at least `HALVED_COLUMNS` in two
halves, so that a decode step of one tile still gives every core of two a share of each
product. What is left is where a row sits inside its tile: 16-row tiles keep a row's bits at
every position under every MKL branch and oneDNN ISA tried, at 1, 2 and 4 threads (8- and
32-row tiles do not, under AVX2). That is a property of the library's kernel, not of this code,
so the engine checks it on the machine it runs on (engine/invariant/needle.py) before it relies
on it.

*Blocks.* A 16-row call pays oneDNN's setup (descriptors made and freed, a fresh output) once per
16 rows, which dominates a long prefill. So an fp32 product of many rows runs whole blocks of
`BLOCK_SIZES` rows from row 0 (the largest first) and tiles for the rest (`row_blocks`), but
only where a block gives every row the very bits a tile gives it: `blocks_agree` measures that
once per block size and kind of weight slice (shape, layout, dtype, thread count) on this
machine, and a size for which it does not hold is not used: a row's bits are its tile's
either way. Likewise the column halves, which only double the calls on one core (every worker
of `nudge run`'s default): there a reordered weight runs whole (`weights.product_slices`) where
`weights.whole_agrees` finds that the whole gives every column the halves' bits.

`linear` is what the model's adopted linears call inside the engine's CPU forward
(engine/invariant/linears.py); `in_row_tiles` is what a quantised layer's fused kernel runs in
there (models/quant/compute.py). What the construction costs: benchmarks/fork_vs_generate.py.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from nudgeability.engine.invariant.cpu.cores import CORES
from nudgeability.engine.invariant.cpu.weights import (
    ONEDNN,
    TILE_ROWS,
    column_slices,
    dense_slices,
    onednn_tile,
    packed_slices,
)

# the larger calls a product takes, largest first, each where it gives a tile's bits
# (`blocks_agree`): the larger the call, the less oneDNN's per-call setup costs a row
BLOCK_SIZES = (1024, 256, 64)


def _onednn_for(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether a product goes to oneDNN: fp32, where torch was built with it."""
    return ONEDNN and x.dtype == torch.float32 and weight.dtype == torch.float32


def tiled_matmul(
    x: torch.Tensor, weight_t: torch.Tensor, parts: list[torch.Tensor] | None = None
) -> torch.Tensor:
    """`x @ weight_t` for x [M, K] and weight_t [K, N] (any strides) in fixed 16-row tiles and the
    weight's `column_slices`, the (tiles, slice) pieces shared between the `CORES`.

    An fp32 product runs each piece as one oneDNN matmul per tile (`parts`: the slices' weights
    as `onednn_tile` takes them; made dense here when not given), everything else as one
    `torch.bmm` over the piece's tiles. Either way every call is [16, K] x [K, slice]."""
    m, k = x.shape
    n = weight_t.shape[1]
    if _onednn_for(x, weight_t):  # `parts` given: the slices were cut by the caller
        if parts is None:
            parts = dense_slices(weight_t, column_slices(n))
        return onednn_product(x, parts)
    slices = column_slices(n)
    xt = _in_tiles(x)
    tiles = xt.shape[0]
    padded = tiles * TILE_ROWS
    spans = CORES.spans(tiles)
    if len(slices) == 1 and len(spans) == 1:
        return torch.bmm(xt, weight_t.expand(tiles, k, n)).view(padded, n)[:m]
    outs = [x.new_empty(tiles, TILE_ROWS, s1 - s0) for s0, s1 in slices]
    work, costs = [], []

    def piece(out: torch.Tensor, part: torch.Tensor, a: int, b: int) -> Callable[[], None]:
        return lambda: torch.bmm(xt[a:b], part.expand(b - a, k, part.shape[1]), out=out[a:b])

    for out, (s0, s1) in zip(outs, slices):
        for a, b in spans:
            work.append(piece(out, weight_t[:, s0:s1], a, b))
            costs.append(float((b - a) * (s1 - s0)))
    CORES.share(work, costs)
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)
    return out.view(padded, n)[:m]


def _in_tiles(x: torch.Tensor) -> torch.Tensor:
    """x [M, K] as [ceil(M / 16), 16, K], the last tile padded with zero rows."""
    m, k = x.shape
    tiles = -(-m // TILE_ROWS)
    if tiles * TILE_ROWS != m:
        x = F.pad(x, (0, 0, 0, tiles * TILE_ROWS - m))
    return x.contiguous().view(tiles, TILE_ROWS, k)


def onednn_product(x: torch.Tensor, parts: list[torch.Tensor]) -> torch.Tensor:
    """x [M, K] (fp32) times a weight given as its column slices' `parts` (dense [s1 - s0, K], or
    reordered by `reorder_slices`): [M, N], one oneDNN call per block of rows (`row_blocks`) and
    slice, shared between the `CORES`."""
    m = x.shape[0]
    flat = x.contiguous()
    if m <= TILE_ROWS and CORES.alone:
        # A decode step's product on one core: one tile per slice, the very calls of the general
        # path below (no block size fits 16 rows), without its bookkeeping, which would cost a
        # noticeable share of a small product's time
        tile = _rows(flat, 0, TILE_ROWS)
        got = [onednn_tile(tile, part) for part in parts]
        return (got[0] if len(got) == 1 else torch.cat(got, dim=1))[:m]
    rows = -(-m // TILE_ROWS) * TILE_ROWS  # the last call's rows past m are zeros (`_rows`)
    # blocks only where every core gets at least one: which calls a row goes through decides
    # none of its bits (`blocks_agree`), so the choice may follow the core count
    sizes = tuple(
        size
        for size in BLOCK_SIZES
        if rows >= size * CORES.count and all(blocks_agree(part, size) for part in parts)
    )
    blocks = row_blocks(rows, sizes)
    if CORES.alone:
        # One core: the same calls in turn, without the pieces `_onednn_blocks` deals (a decode
        # step runs two hundred products of one tile, where that bookkeeping would cost more
        # than a third of the product's own time)
        got = [[onednn_tile(_rows(flat, a, b), part) for a, b in blocks] for part in parts]
        return _joined(got)[:m]
    return _onednn_blocks(flat, parts, blocks)[:m]


def _rows(x: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """x's rows [a, b), with zero rows past its end: only a product's last call reaches them, so
    only its rows are copied (padding the whole input first copied all of it, each product)."""
    m = x.shape[0]
    return x[a:b] if b <= m else F.pad(x[a:m], (0, 0, 0, b - m))


def row_blocks(rows: int, sizes: tuple[int, ...] = ()) -> list[tuple[int, int]]:
    """The calls a product of `rows` rows (a multiple of TILE_ROWS) runs in: whole blocks of each
    of `sizes` (largest first, as many as fit) from row 0, then 16-row tiles for the rest."""
    calls, a = [], 0
    for size in sorted(sizes, reverse=True):
        while rows - a >= size:
            calls.append((a, a + size))
            a += size
    return calls + [(t, t + TILE_ROWS) for t in range(a, rows, TILE_ROWS)]


_AGREE: dict[tuple, bool] = {}  # (size, the part's kind, shape, dtype, threads) -> `blocks_agree`


def blocks_agree(part: torch.Tensor, size: int) -> bool:
    """Whether a `size`-row call with the weight slice `part` gives every row the very bits a
    16-row tile gives it, measured once per size and kind of slice and kept: `size` rows drawn at
    random through one call, against the same rows shuffled into tiles. Where it holds, a block
    is only a cheaper way to run its tiles (a row's bits do not depend on which of the two shapes
    computed it, nor where it sat); where it does not, the product does not take blocks of that
    size, so that no record depends on the answer (module docstring, *Blocks*). The answer is the
    kernel's, chosen by the shapes, the dtype, the thread count and the machine, not by values,
    which is why the slice's kind is the key."""
    layout = "packed" if part.is_mkldnn else tuple(part.stride())
    key = (size, layout, tuple(part.shape), part.dtype, torch.get_num_threads())
    agrees = _AGREE.get(key)
    if agrees is None:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(size, part.shape[1], generator=generator)
        order = torch.randperm(size, generator=generator)
        with torch.no_grad():
            block = onednn_tile(x, part)[order]
            shuffled = x[order]
            tiles = [
                onednn_tile(shuffled[t : t + TILE_ROWS], part) for t in range(0, size, TILE_ROWS)
            ]
        agrees = _AGREE[key] = torch.equal(block, torch.cat(tiles))
    return agrees


def _onednn_blocks(
    flat: torch.Tensor, parts: list[torch.Tensor], blocks: list[tuple[int, int]]
) -> torch.Tensor:
    """[rows, N] from flat [m, K] (rows: m rounded up to 16, `_rows`): one oneDNN call per (block, slice), the (run of blocks,
    slice) pieces dealt to the cores by rows, the outputs joined by `cat`."""
    got: list[list] = [[None] * len(blocks) for _ in parts]
    work, costs = [], []

    def piece(i: int, a: int, b: int) -> Callable[[], None]:
        def run() -> None:
            for j in range(a, b):
                got[i][j] = onednn_tile(_rows(flat, *blocks[j]), parts[i])

        return run

    for a, b in _runs(blocks, CORES.count):
        rows = blocks[b - 1][1] - blocks[a][0]
        for i, part in enumerate(parts):
            work.append(piece(i, a, b))
            costs.append(float(rows * part.shape[0]))
    CORES.share(work, costs)
    return _joined(got)


def _runs(blocks: list[tuple[int, int]], count: int) -> list[tuple[int, int]]:
    """`blocks` cut into at most `count` contiguous runs of nearly equal rows (index ranges): a
    block goes to the run its middle row falls in."""
    total = blocks[-1][1]
    runs, start = [], 0
    for c in range(1, count + 1):
        end = start
        while end < len(blocks) and (c == count or sum(blocks[end]) <= 2 * total * c / count):
            end += 1
        if end > start:
            runs.append((start, end))
        start = end
    return runs


def _joined(got: list[list[torch.Tensor]]) -> torch.Tensor:
    """[tiles * 16, N] from each slice's tile outputs `got[slice][tile]` (one tile of one slice:
    the call's own output, no copy)."""
    columns = [tiles[0] if len(tiles) == 1 else torch.cat(tiles) for tiles in got]
    return columns[0] if len(columns) == 1 else torch.cat(columns, dim=1)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear` in fixed row tiles (module docstring); CUDA and integer inputs go to torch's own."""
    if x.device.type != "cpu" or not x.is_floating_point() or x.dim() == 0 or weight.dim() != 2:
        return F.linear(x, weight, bias)
    flat = x.reshape(-1, x.shape[-1])
    if _onednn_for(x, weight):
        out = onednn_product(flat, packed_slices(weight))
    else:
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
