"""Batch-invariant CPU matrix products: every row computed in an order fixed by that row alone.

A library GEMM picks its code path and its split of the sum over K by the shape of the call, and
on CPU nothing in MKL documents that a row's result stays the same when the number of rows M
changes: measured (benchmarks/kernel_branches.py, RESULTS.md), a row of `F.linear` changes bits
with M under MKL's AVX2 branch for 55 of 64 values of M, under COMPATIBLE for 49, and even on
this machine's own AVX-512 branch below 16 rows. So the rows a step computes must not decide
how any one of them is summed.

The construction: every product runs as calls of exactly `TILE_ROWS` rows (the last tile padded
with zero rows), so that the kernel only ever sees one shape per weight, `[TILE_ROWS, K] x
[K, N_slice]`, whatever M is. An fp32 product calls oneDNN's matmul once per tile (the op
inductor calls for a packed bf16 CPU linear, `torch.ops.mkldnn._linear_pointwise`; the model's
weights up to REORDER_MAX_COLUMNS wide reordered once into its blocked layout: `_packed_slices`,
or, in a run that owns its model, models/reordered.py); measured, 1.5-3.1x faster than MKL's GEMM at these shapes on this AMD machine
(RESULTS.md, oneDNN products). Other dtypes go through `torch.bmm` over the tiles. Weights run
in column slices fixed by their shape alone (`column_slices`): wide ones (the LM head) in slices
of `SLICE_COLUMNS` (a slice's weight stays in cache across the tiles), others of at least
`HALVED_COLUMNS` in two halves, so that a decode step of one tile still gives every core of two
a share of each product. What is left is where a row sits inside its tile; measured, 16-row
tiles keep a row's bits at every position under every MKL branch (COMPATIBLE, SSE4_2, AVX,
AVX2, AVX512), oneDNN's under every ISA it can be held to (ONEDNN_MAX_CPU_ISA SSE41, AVX, AVX2,
AVX512_CORE and up), at 1, 2 and 4 threads, while MKL's 8-row tiles do not under AVX2 and
32-row tiles do not under AVX2 either. That is a property of the library's kernel, not of this
code, so the engine checks it on the machine it runs on (`engine/invariance_check.py`) before
it relies on it.

`invariant_products()` routes `torch.nn.functional.linear` (every `nn.Linear`, the LM head, the
exact path of the quantised linears) through `linear` for its duration; `in_row_tiles` is what a
quantised layer's fused kernel runs in (models/quant/compute.py).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager

import torch
import torch.nn.functional as F

TILE_ROWS = 16
SLICE_COLUMNS = 4096  # columns per call of a wide weight; fixed per weight shape
HALVED_COLUMNS = 512  # a weight at least this wide runs in two column halves (`column_slices`)
# The widest weight reordered into oneDNN's layout (`reorderable`): in the supported models only
# the LM head is wider, and its table is the embedding's in tied models, which must stay dense
# for the lookups, so a reordered head would hold the largest weight twice (SmolLM2: 108 MiB of
# 513; RESULTS.md, Demo memory). The head runs from the plain layout instead, in every path.
REORDER_MAX_COLUMNS = SLICE_COLUMNS
_torch_linear = torch.nn.functional.linear  # the library's own, called for what is not ours


class Cores:
    """`count` cores for independent fixed-shape kernel calls: the calling thread and
    `count - 1` persistent threads, each running torch on one thread.

    This is how the invariant forward uses every core without letting the core count into the
    sums: a product's tiles (or a wide weight's column slices) are split between the cores,
    and each core runs the very calls a single thread would, on the same shapes, one sequential
    kernel each (torch releases the GIL inside its kernels). Which core computes a tile decides
    nothing about its bits, so the records do not depend on the core count
    (tests/models/test_cores.py). `invariant_products` sets the count for its duration and
    back to 1 after it; the threads stay, idle, for the next forward."""

    def __init__(self, count: int = 1):
        self.count = 1
        self._pool: ThreadPoolExecutor | None = None
        self._threads = 0
        self._running = False  # inside `run`: nested calls stay on their own core
        self.resize(count)

    def forget_threads(self) -> None:
        """After a fork: the child has none of the parent's threads; the next `resize` above one
        core starts its own (splice/run/workers.py forks its workers)."""
        self._pool, self._threads, self._running, self.count = None, 0, False, 1

    def resize(self, count: int) -> None:
        """Use `count` cores from now on (threads are started on first need, never stopped)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"cores must be a positive integer, got {count!r}")
        if count - 1 > self._threads:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self._pool = ThreadPoolExecutor(count - 1, "nudge-core")
            self._threads = count - 1
        self.count = count

    def run(self, jobs: list[Callable[[], None]]) -> None:
        """Run every job once: the first on the calling thread, the rest on the others; returns
        when all have finished (the first job's exception, if any, is raised here). A job that
        itself shares work (a product inside a group's attention) runs it on its own core."""
        if self.count == 1 or len(jobs) == 1 or self._running:
            for job in jobs:
                job()
            return
        # grad and inference mode are per thread: the others run their jobs in the caller's
        inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()
        self._running = True
        try:
            futures = [self._pool.submit(_in_mode, job, inference, grad) for job in jobs[1:]]
            try:
                jobs[0]()
            finally:
                wait(futures)  # every job has finished before anything is raised or returned
        finally:
            self._running = False
        for future in futures:
            future.result()

    def share(self, work: list[Callable[[], None]], costs: list[float]) -> None:
        """Run every callable of `work` once, whole, dealt to the cores by their `costs` (the
        costliest first, each to the least loaded core). How they are dealt decides no bit:
        each is the same sequence of calls on whichever core runs it."""
        if self.count == 1 or self._running or len(work) < 2:
            for item in work:
                item()
            return
        bins: list[list[Callable[[], None]]] = [[] for _ in range(self.count)]
        loads = [0.0] * self.count
        for i in sorted(range(len(work)), key=lambda i: -costs[i]):
            core = loads.index(min(loads))
            bins[core].append(work[i])
            loads[core] += costs[i]

        def job(items: list[Callable[[], None]]) -> Callable[[], None]:
            return lambda: [item() for item in items]

        self.run([job(items) for items in bins if items])

    def spans(self, n: int) -> list[tuple[int, int]]:
        """`range(n)` cut into at most `count` contiguous, nearly equal spans (one span inside
        `run`, where the caller already has its core)."""
        parts = 1 if self._running else min(self.count, n)
        bounds = [n * i // parts for i in range(parts + 1)]
        return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _in_mode(job: Callable[[], None], inference: bool, grad: bool) -> None:
    # A thread starts with OpenMP's and MKL's default thread counts, not the caller's one:
    # pinned here, so that every kernel a core runs is one sequential call.
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    with torch.inference_mode(inference), torch.set_grad_enabled(grad):
        job()


CORES = Cores()  # the process's cores; `invariant_products` sizes them to torch's thread count
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=CORES.forget_threads)


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


def _packed_slices(weight: torch.Tensor, slices: list[tuple[int, int]]) -> list[torch.Tensor]:
    """The slices of a model weight (a Parameter) reordered once into oneDNN's blocked layout
    for TILE_ROWS-row calls (as inductor packs a frozen linear's weight; a dense weight runs a
    kernel on its plain layout, slower: RESULTS.md, oneDNN products), kept while the Parameter
    lives and remade when it changes: a new storage, shape or strides, or an in-place write that
    bumps its version. A write the version counter cannot see (through `.data`, or into an
    inference tensor) is not seen: `forget_reordered` drops a model's copies, and every
    `ModelRunner` calls it when it takes a model. Kept here, not on the Parameter, so that a
    model still pickles whole (oneDNN's layout has no storage to save). A weight made for one
    call (a dequantised one) is not worth a reorder and goes dense, and so does a weight that is
    not `reorderable` (the LM head). The reordered copy costs the weight's size again in memory,
    which a run that owns its model does not pay (models/reordered.py)."""
    if not isinstance(weight, torch.nn.Parameter) or not reorderable(weight):
        return _dense_slices(weight.t(), slices)
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
    The rule is the shape's alone, the same for a kept copy and for models/reordered.py, so a
    weight's calls never depend on who holds the model."""
    return weight.dtype == torch.float32 and weight.shape[0] <= REORDER_MAX_COLUMNS


def reorder_slices(weight: torch.Tensor, slices: list[tuple[int, int]]) -> list[torch.Tensor]:
    """The rows [s0:s1] of an fp32 weight [N, K], each reordered into oneDNN's blocked layout for
    TILE_ROWS-row calls (`_reorder_linear_weight`), as `_onednn_tile` takes them. On one torch
    thread, as every call that reads them runs: oneDNN picks the block width of the layout by
    the thread count (its brgemm inner product's `get_adjusted_oc_block`), so a copy made at
    two threads would not be the one a kept copy, made inside `invariant_products`, is."""
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
    reordered by `reorder_slices`): [M, N], one oneDNN call per 16-row tile and slice, shared
    between the `CORES`."""
    xt = _in_tiles(x)
    if CORES.count == 1 or CORES._running:
        # One core: the same calls in turn, without the pieces `_onednn_tiles` deals (a decode
        # step runs two hundred products of one tile, where that bookkeeping would cost more
        # than a third of the product's own time)
        got = [[_onednn_tile(xt[t], part) for t in range(xt.shape[0])] for part in parts]
        return _joined(got)[: x.shape[0]]
    return _onednn_tiles(xt, parts, CORES.spans(xt.shape[0]))[: x.shape[0]]


def _onednn_tiles(xt: torch.Tensor, parts: list[torch.Tensor], spans) -> torch.Tensor:
    """[tiles * 16, N] from tiles xt [tiles, 16, K]: one oneDNN call per (tile, slice), the
    (span of tiles, slice) pieces dealt to the cores, the outputs joined by `cat` (one tile of
    one slice: the call's own output)."""
    got: list[list] = [[None] * xt.shape[0] for _ in parts]
    work, costs = [], []

    def piece(i: int, a: int, b: int) -> Callable[[], None]:
        def run() -> None:
            for t in range(a, b):
                got[i][t] = _onednn_tile(xt[t], parts[i])

        return run

    for i, part in enumerate(parts):
        for a, b in spans:
            work.append(piece(i, a, b))
            costs.append(float((b - a) * part.shape[0]))
    CORES.share(work, costs)
    return _joined(got)


def _joined(got: list[list[torch.Tensor]]) -> torch.Tensor:
    """[tiles * 16, N] from each slice's tile outputs `got[slice][tile]` (one tile of one slice:
    the call's own output, no copy)."""
    columns = [tiles[0] if len(tiles) == 1 else torch.cat(tiles) for tiles in got]
    return columns[0] if len(columns) == 1 else torch.cat(columns, dim=1)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear` in fixed row tiles (module docstring); CUDA and integer inputs go to torch's own."""
    if x.device.type != "cpu" or not x.is_floating_point() or x.dim() == 0 or weight.dim() != 2:
        return _torch_linear(x, weight, bias)
    flat = x.reshape(-1, x.shape[-1])
    if _onednn_for(x, weight):
        out = onednn_product(flat, _packed_slices(weight, column_slices(weight.shape[0])))
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


@contextmanager
def invariant_products() -> Iterator[None]:
    """Route `torch.nn.functional.linear` through `linear`, on one torch thread, for the duration.

    `nn.Linear.forward` looks `F.linear` up when it runs, so this reaches every linear of an HF
    model, with no change to the model. Torch itself runs on one thread, because a library GEMM
    run on several threads splits its work by the shape and the thread count: measured under
    MKL's AVX2 branch at 2 threads, a 16-row tile of [16, 128] x [128, 64] changes a row's bits
    with its position, and so do the attention kernel's GEMMs. The threads torch was given
    become `CORES` instead: whole tiles and slices, each one sequential kernel, shared between
    threads (`Cores`), so the records depend on the thread count no more than on the batch.
    Not thread-safe: one forward at a time per process, as the engine runs them. Re-entrant."""
    if torch.nn.functional.linear is linear:
        yield
        return
    threads = torch.get_num_threads()
    torch.nn.functional.linear = linear
    CORES.resize(threads)
    if threads != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.nn.functional.linear = _torch_linear
        CORES.resize(1)
        if threads != 1:
            torch.set_num_threads(threads)
