"""A weight's side of the invariant products (engine/invariant/cpu/products.py): the column
slices it runs in, fixed by its shape alone, and their copies reordered into oneDNN's blocked
layout, made once per Parameter and kept beside it.

`TILE_ROWS` is the rows of every product call (products.py says why); it lives here because a
reordered layout is made for calls of that many rows.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator

import torch

from nudgeability.engine.invariant.cpu.cores import CORES

TILE_ROWS = 16
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
    on one core, where halves only add calls, the weight whole, if `whole_agrees` (engine/invariant/cpu/products.py, *Blocks*)."""
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
            whole = onednn_tile(x, reorder_slices(weight, [(0, n)])[0])
            halves = [onednn_tile(x, part) for part in reorder_slices(weight, column_slices(n))]
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


def onednn_tile(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """One [TILE_ROWS, K] tile times `weight` [N, K] (dense, or packed by `packed_slices`) by
    oneDNN's matmul (`mkldnn::_linear_pointwise`, the op inductor calls for a packed linear)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")


def dense_slices(weight_t: torch.Tensor, slices: list[tuple[int, int]]) -> list[torch.Tensor]:
    """Each slice's weight rows [s1 - s0, K], contiguous, as oneDNN's matmul takes them."""
    return [weight_t[:, s0:s1].t().contiguous() for s0, s1 in slices]


_PACKED: dict[int, tuple] = {}  # id(Parameter) -> (what it was made from, its reordered slices)


def packed_slices(weight: torch.Tensor) -> list[torch.Tensor]:
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
        return dense_slices(weight.t(), column_slices(n))
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
    TILE_ROWS-row calls (`_reorder_linear_weight`), as `onednn_tile` takes them. On one torch
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
