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
weights up to REORDER_MAX_COLUMNS wide reordered once into its blocked layout, `_packed_slices`,
or, in a run that owns its model, cpu/reordered.py), which is faster than MKL's GEMM at these
shapes. Other dtypes go through `torch.bmm` over the tiles. Weights run in column slices fixed
by their shape alone (`column_slices`): wide ones (the LM head) in slices of `SLICE_COLUMNS` (a
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
of `nudge run`'s default): there a reordered weight runs whole (`product_slices`) where
`whole_agrees` finds that the whole gives every column the halves' bits.

`linear` is what the model's adopted linears call inside the engine's CPU forward
(engine/invariant/linears.py); `in_row_tiles` is what a quantised layer's fused kernel runs in
there (models/quant/compute.py). What the construction costs: benchmarks/fork_vs_generate.py.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from nudgeability.engine.invariant.cpu.cores import CORES

TILE_ROWS = 16
# the larger calls a product takes, largest first, each where it gives a tile's bits
# (`blocks_agree`): the larger the call, the less oneDNN's per-call setup costs a row
BLOCK_SIZES = (1024, 256, 64)
SLICE_COLUMNS = 4096  # columns per call of a wide weight; fixed per weight shape
HALVED_COLUMNS = 512  # a weight at least this wide runs in two column halves (`column_slices`)
# The widest weight reordered into oneDNN's layout (`reorderable`): in the supported models only
# the LM head is wider, and its table is the embedding's in tied models, which must stay dense
# for the lookups, so a reordered head would hold the largest weight twice (in SmolLM2 a fifth
# of the weights). The head runs from the plain layout instead, in every path.
REORDER_MAX_COLUMNS = SLICE_COLUMNS


def column_slices(n: int) -> list[tuple[int, int]]:
    """The column slices `[(s0, s1)]` a weight of `n` output columns runs in, fixed by `n` alone:
    a wide weight (the LM head) in slices of SLICE_COLUMNS, one of at least HALVED_COLUMNS in two
    halves (cut at a multiple of 16), so that even one tile's product is work for two cores; a
    narrow one whole."""
    if n > SLICE_COLUMNS:
        return [(s0, min(s0 + SLICE_COLUMNS, n)) for s0 in range(0, n, SLICE_COLUMNS)]
    if n >= HALVED_COLUMNS:
        half = -(-(n // 2) // 16) * 16
        return [(0, half), (half, n)]
    return [(0, n)]


def product_slices(n: int, k: int, cores: int) -> list[tuple[int, int]]:
    """The slices a reordered weight [n, k] runs in on `cores` cores: its `column_slices`, or
    on one core, where halves only add calls, the weight whole, if `whole_agrees` (module docstring, *Blocks*)."""
    slices = column_slices(n)
    if cores == 1 and len(slices) == 2 and whole_agrees(n, k):
        return [(0, n)]
    return slices


_WHOLE: dict[tuple, bool] = {}  # (n, k, threads) -> `whole_agrees`


def whole_agrees(n: int, k: int) -> bool:
    """Whether a weight [n, k] reordered whole gives every column of a 16-row tile the very bits
    its two `column_slices` halves give, measured once per shape and thread count on a random
    weight and tile (the kernel's answer is the shapes', not the values'). Where it holds, the
    whole weight is only a cheaper way to run the halves; where not, the halves run."""
    key = (n, k, torch.get_num_threads())
    agrees = _WHOLE.get(key)
    if agrees is None:
        generator = torch.Generator().manual_seed(1)
        weight = torch.randn(n, k, generator=generator)
        x = torch.randn(TILE_ROWS, k, generator=generator)
        with torch.no_grad():
            whole = _onednn_tile(x, reorder_slices(weight, [(0, n)])[0])
            halves = [_onednn_tile(x, part) for part in reorder_slices(weight, column_slices(n))]
        agrees = _WHOLE[key] = torch.equal(whole, torch.cat(halves, dim=1))
    return agrees


def _onednn_matmul_available() -> bool:
    try:
        return torch.backends.mkldnn.is_available() and hasattr(
            torch.ops.mkldnn, "_linear_pointwise"
        )
    except (AttributeError, RuntimeError):
        return False


ONEDNN = _onednn_matmul_available()  # products by oneDNN's matmul where torch was built with it


def _onednn_for(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether a product goes to oneDNN: fp32, eager. Under torch.compile the graph's own GEMM
    runs instead (inductor lowers `_linear_pointwise` only for a frozen, constant weight)."""
    return (
        ONEDNN
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and not torch.compiler.is_compiling()
    )


def _onednn_tile(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """One [TILE_ROWS, K] tile times `weight` [N, K] (dense, or packed by `_packed_slices`) by
    oneDNN's matmul (`mkldnn::_linear_pointwise`, the op inductor calls for a packed linear)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")


def _dense_slices(weight_t: torch.Tensor, slices: list[tuple[int, int]]) -> list[torch.Tensor]:
    """Each slice's weight rows [s1 - s0, K], contiguous, as oneDNN's matmul takes them."""
    return [weight_t[:, s0:s1].t().contiguous() for s0, s1 in slices]


_PACKED: dict[int, tuple] = {}  # id(Parameter) -> (what it was made from, its reordered slices)


def _packed_slices(weight: torch.Tensor) -> list[torch.Tensor]:
    """The `product_slices` of a model weight (a Parameter) at the cores in use, reordered once into oneDNN's blocked layout
    for TILE_ROWS-row calls (as inductor packs a frozen linear's weight; a dense weight runs a
    slower kernel on its plain layout), kept while the Parameter
    lives and remade when it changes: a new storage, shape or strides, or an in-place write that
    bumps its version. A write the version counter cannot see (through `.data`, or into an
    inference tensor) is not seen: `forget_reordered` drops a model's copies, and every
    `ModelRunner` calls it when it takes a model. Kept here, not on the Parameter, so that a
    model still pickles whole (oneDNN's layout has no storage to save). A weight made for one
    call (a dequantised one) is not worth a reorder and goes dense, and so does a weight that is
    not `reorderable` (the LM head). The reordered copy costs the weight's size again in memory,
    which a run that owns its model does not pay (engine/invariant/cpu/reordered.py)."""
    n, k = weight.shape
    if not isinstance(weight, torch.nn.Parameter) or not reorderable(weight):
        return _dense_slices(weight.t(), column_slices(n))
    slices = product_slices(n, k, CORES.count)
    try:
        version = weight._version
    except RuntimeError:  # an inference tensor has no version counter (`forget_reordered`)
        version = None
    key = (weight.data_ptr(), version, tuple(weight.shape), weight.stride(), tuple(slices))
    kept = _PACKED.get(id(weight))
    if kept is None or kept[0] != key:
        parts = reorder_slices(weight, slices)
        if kept is None:  # dropped with the Parameter, before its id can be reused
            weakref.finalize(weight, _PACKED.pop, id(weight), None)
        kept = _PACKED[id(weight)] = (key, parts)
    return kept[1]


def reorderable(weight: torch.Tensor) -> bool:
    """Whether a model weight [N, K] runs from slices reordered into oneDNN's layout: fp32 and at
    most REORDER_MAX_COLUMNS wide (the LM head runs from its plain layout: why at the constant).
    The rule is the shape's alone, the same for a kept copy and for engine/invariant/cpu/reordered.py, so a
    weight's calls never depend on who holds the model."""
    return weight.dtype == torch.float32 and weight.shape[0] <= REORDER_MAX_COLUMNS


def reorder_slices(weight: torch.Tensor, slices: list[tuple[int, int]]) -> list[torch.Tensor]:
    """The rows [s0:s1] of an fp32 weight [N, K], each reordered into oneDNN's blocked layout for
    TILE_ROWS-row calls (`_reorder_linear_weight`), as `_onednn_tile` takes them. On one torch
    thread, as every call that reads them runs: oneDNN picks the block width of the layout by
    the thread count (its brgemm inner product's `get_adjusted_oc_block`), so a copy made at
    two threads would not be the one a kept copy, made inside `invariant_forward` (engine/invariant/linears.py), is."""
    threads = torch.get_num_threads()
    if threads != 1:
        torch.set_num_threads(1)
    try:
        with torch.inference_mode(False), torch.no_grad():
            rows = weight.detach()
            return [
                torch.ops.mkldnn._reorder_linear_weight(rows[s0:s1].contiguous(), TILE_ROWS)
                for s0, s1 in slices
            ]
    finally:
        if threads != 1:
            torch.set_num_threads(threads)


def forget_reordered(parameters: Iterator[torch.Tensor]) -> None:
    """Drop the reordered copies of `parameters` (a model's): the next product makes them again
    from the weights as they are now."""
    for parameter in parameters:
        _PACKED.pop(id(parameter), None)


def tiled_matmul(
    x: torch.Tensor, weight_t: torch.Tensor, parts: list[torch.Tensor] | None = None
) -> torch.Tensor:
    """`x @ weight_t` for x [M, K] and weight_t [K, N] (any strides) in fixed 16-row tiles and the
    weight's `column_slices`, the (tiles, slice) pieces shared between the `CORES`.

    An fp32 product runs each piece as one oneDNN matmul per tile (`parts`: the slices' weights
    as `_onednn_tile` takes them; made dense here when not given), everything else as one
    `torch.bmm` over the piece's tiles. Either way every call is [16, K] x [K, slice]."""
    m, k = x.shape
    n = weight_t.shape[1]
    if _onednn_for(x, weight_t):  # `parts` given: the slices were cut by the caller
        if parts is None:
            parts = _dense_slices(weight_t, column_slices(n))
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
        got = [_onednn_tile(tile, part) for part in parts]
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
        got = [[_onednn_tile(_rows(flat, a, b), part) for a, b in blocks] for part in parts]
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
            block = _onednn_tile(x, part)[order]
            shuffled = x[order]
            tiles = [
                _onednn_tile(shuffled[t : t + TILE_ROWS], part) for t in range(0, size, TILE_ROWS)
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
                got[i][j] = _onednn_tile(_rows(flat, *blocks[j]), parts[i])

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
        out = onednn_product(flat, _packed_slices(weight))
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
