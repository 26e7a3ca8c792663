"""A step's three kinds of attention on CPU, each through the fixed-shape calls of `engine/invariant/cpu/attention.py`.

`shared_prefix_attention.py` says what each part attends to; this module lays each one out so
that no query's kernel call depends on what else runs in the step:

- `prefix_chunk`: a prefix chunk's queries against their run, causal (and windowed). The query
  rows are (token, head) pairs in blocks of 64 positions aligned to the run's position 0, each
  block one call against the keys before its end: a query sees the same call whatever the
  chunking (padding rows and hidden zero keys fill a block the chunk cuts, which changes
  nothing);
- `prefix_segment`: row tokens against one prefix segment, folded into 16-row tiles (the groups
  that share the segment in one call: `cpu_decode_rows.py`);
- `own_keys_rows`: each row token against its own row's slots, one token per kernel item (a
  prefill chunk's tokens of a row packed into items where `attention.packing_agrees`), in
  spans of rows that the cores share (`keep_real` then drops a prefill part's padding).

Masks are built once per step and window and cached in `layout.per_call`, shared by every layer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nudgeability.engine.invariant.cpu.attention import (
    OWN_BLOCK,
    PACKED_BIAS_BYTES,
    PREFIX_BLOCK,
    QUERY_TILE,
    lowest,
    own_keys_attention,
    own_tokens_per_item,
    pack_bias,
    packed_bias_bytes,
    packing_agrees,
    pad_keys,
    prefix_block_attention,
    segment_width,
    shared_keys_attention,
)
from nudgeability.engine.invariant.cpu.cores import CORES
from nudgeability.engine.kv.kv_cache import LayerKV
from nudgeability.engine.scheduling.step_layout import (
    GroupSpan,
    PrefixChunk,
    StepLayout,
    SuffixPart,
)


def prefix_chunk(
    q: torch.Tensor,
    handle: LayerKV,
    layout: StepLayout,
    index: int,
    chunk: PrefixChunk,
    scaling: float,
    window: int | None,
) -> torch.Tensor:
    """Chunk `index` of the step, q [1, H, T, D] (the step's): its [1, L, H, D] output.

    The chunk's positions run in blocks of PREFIX_BLOCK positions aligned to the run's position
    0; a block at [b0, b1) is one kernel call of its g * PREFIX_BLOCK folded query rows against
    the keys [first, b1) its rows can reach, `first` fixed by b0 (0, or the window's start), with
    a causal bias. Every shape of the call is then fixed by b0 alone, whatever the chunking: a
    block that the chunk starts or ends inside is padded to its full rows (zero queries, whose
    outputs are dropped) and its keys past the chunk zero-padded and hidden, which changes no
    visible row's sums (`engine/invariant/cpu/attention.py`: a hidden key's weight is exactly 0). The blocks are
    dealt to the cores whole (`engine/invariant/cpu/cores.Cores.share`)."""
    kv = handle.k.shape[0]
    _, h, _, d = q.shape
    g = h // kv
    length = chunk.c1 - chunk.c0
    # HF's head h reads kv head h // g: the rows are (token, head) in token order
    qc = q[0, :, chunk.t0 : chunk.t1].reshape(kv, g, length, d)
    folded = qc.permute(0, 2, 1, 3).reshape(kv, length * g, d)
    lead = chunk.c0 % PREFIX_BLOCK
    blocks = range(chunk.c0 - lead, chunk.c1, PREFIX_BLOCK)
    tail = blocks[-1] + PREFIX_BLOCK - chunk.c1
    rows = F.pad(folded, (0, 0, lead * g, tail * g)) if lead or tail else folded
    pool = chunk.start  # the run's position 0 in the pool
    # each block's real rows go straight to their place in HF's [L, H, D] order (one copy, on
    # the core that computed them, instead of a join and then a transpose)
    out = q.new_empty(length, kv, g, d)
    work, costs = [], []
    for b0 in blocks:
        b1 = b0 + PREFIX_BLOCK
        first = prefix_block_first(b0, window)
        real = min(b1, chunk.c1)
        keys, values = (
            handle.k[:, pool + first : pool + real],
            handle.v[:, pool + first : pool + real],
        )
        if real < b1:  # the chunk ends inside the block: its later keys are hidden zeros
            keys, values = pad_keys(keys, b1 - first), pad_keys(values, b1 - first)
        bias = prefix_block_bias(layout, b0, window, g, q.dtype, q.device)
        r0 = (b0 - blocks[0]) * g
        block_q = rows[:, r0 : r0 + PREFIX_BLOCK * g]
        p0, p1 = max(b0, chunk.c0), real  # the block's positions inside the chunk
        place = (out[p0 - chunk.c0 : p1 - chunk.c0], p0 - b0, p1 - b0)
        work.append(_block_job(place, block_q, keys, values, bias, scaling))
        costs.append(float(b1 - first))
    CORES.share(work, costs)
    return out.view(1, length, h, d)


def _block_job(place, block_q, keys, values, bias, scaling):
    """A block's call, its rows for positions [i0, i1) of the block copied into `target`
    [i1 - i0, kv, g, D]."""
    target, i0, i1 = place

    def job():
        o = prefix_block_attention(block_q, keys, values, bias, scaling)
        kv, _, d = o.shape
        target.copy_(o.view(kv, PREFIX_BLOCK, -1, d)[:, i0:i1].permute(1, 0, 2, 3))

    return job


def prefix_block_first(b0: int, window: int | None) -> int:
    """The first key position a prefix block starting at `b0` reads: 0, or on a sliding layer
    the first its first row can see (later rows hide more through the bias)."""
    return 0 if window is None else max(0, b0 - window + 1)


def prefix_block_bias(layout, b0, window, g, dtype, device) -> torch.Tensor:
    """[1, 1, g * PREFIX_BLOCK, b0 + PREFIX_BLOCK - first]: folded row r (position b0 + r // g)
    sees key position p when p <= its position (and within the window).

    With no window the bias of every block is a column slice (a view) of one causal pattern,
    zeros before the block's own positions; cached per step in `layout.per_call`."""
    first = prefix_block_first(b0, window)
    b1 = b0 + PREFIX_BLOCK
    if window is None:
        key = ("prefix block", g, dtype)
        pattern = layout.per_call.get(key)
        if pattern is None or pattern.shape[-1] < b1:
            width = max(b1, 2 * (0 if pattern is None else pattern.shape[-1]))
            qpos = width - PREFIX_BLOCK + torch.arange(PREFIX_BLOCK * g, device=device) // g
            visible = torch.arange(width, device=device)[None, :] <= qpos[:, None]
            pattern = torch.where(visible, 0.0, lowest(dtype)).to(dtype)[None, None]
            layout.per_call[key] = pattern
        return pattern[..., pattern.shape[-1] - b1 :]
    key = ("prefix block", b0, window, g, dtype)
    if key not in layout.per_call:
        qpos = b0 + torch.arange(PREFIX_BLOCK * g, device=device)[:, None] // g
        kpos = torch.arange(first, b1, device=device)[None, :]
        visible = (kpos <= qpos) & ((qpos - kpos) < window)
        bias = torch.where(visible, 0.0, lowest(dtype)).to(dtype)
        layout.per_call[key] = bias[None, None]
    return layout.per_call[key]


def prefix_segment(
    folded: torch.Tensor,
    handle: LayerKV,
    layout: StepLayout,
    span: GroupSpan,
    cache_key: tuple,
    pool_start: int,
    first_position: int,
    keys: int,
    scaling: float,
    window: int | None,
    g: int,
):
    """Folded row tokens [kv, R, D] (R = tokens x g: a group's, or on a layer with no window,
    any groups' whole tiles) against `keys` prefix keys from pool slot `pool_start` (position
    `first_position`): o [kv, R, D], lse [kv, R]. On a sliding layer the rows are `span`'s."""
    k, v = _segment_keys(handle, pool_start, keys, window)
    bias = _segment_bias(
        layout, span, cache_key, first_position, keys, k.shape[1], g, window, folded.dtype
    )
    return shared_keys_attention(folded, k, v, bias, scaling)


IN_PLACE_DTYPES = (torch.float32, torch.bfloat16)  # whose lowest finite value absorbs a score


def _segment_keys(handle: LayerKV, pool_start: int, keys: int, window: int | None):
    """The segment's keys and values padded to its `segment_width`: read in place from the
    pool where the pool reaches that far, else copied and zero-padded.

    In place, the slots after the segment stand for the padding. They are hidden by the bias
    (`_segment_bias` hides every key from `keys` on), and the pool holds only finite numbers
    (zero-filled storage, or K/V of real tokens), so each hidden score is the bias itself: in
    fp32 and bf16 the lowest finite value absorbs any score below 1e31, exactly as a zero key's
    0. Its weight is then exactly 0 and its value row adds an exact 0, as a zero row would. So
    both give the same bits (tests/engine/invariant/test_attention_shapes.py), and the in-place read
    saves copying a long prefix's keys in every layer of every step. Sliding layers and fp16
    (whose lowest finite value absorbs nothing) take the copy."""
    padded = segment_width(keys)
    pool = handle.k.shape[1]
    if window is None and handle.k.dtype in IN_PLACE_DTYPES and pool_start + padded <= pool:
        return (
            handle.k[:, pool_start : pool_start + padded],
            handle.v[:, pool_start : pool_start + padded],
        )
    k = pad_keys(handle.k[:, pool_start : pool_start + keys], padded)
    v = pad_keys(handle.v[:, pool_start : pool_start + keys], padded)
    return k, v


def _segment_bias(layout, span, cache_key, first_position, keys, padded, g, window, dtype):
    """None when every key is real and visible; else [1, 1, 1, S] (padding hidden) or, on a
    sliding layer, [1, tiles, 16, S] (a folded query sees position p when q_pos - p < window)."""
    if window is None and keys == padded:
        return None
    key = ("segment", *cache_key, first_position, keys, window, g, dtype)
    if key not in layout.per_call:
        device = layout.slots.device
        real = torch.arange(padded, device=device) < keys
        if window is None:
            visible = real[None, None, None, :]
        else:
            qpos = layout.row_positions[span.a0 : span.a1].repeat_interleave(g)
            total = -(-qpos.shape[0] // QUERY_TILE) * QUERY_TILE
            qpos = torch.cat([qpos, qpos[-1:].expand(total - qpos.shape[0])])
            kpos = first_position + torch.arange(padded, device=device)
            visible = real[None, :] & ((qpos[:, None] - kpos[None, :]) < window)
            visible = visible.view(1, total // QUERY_TILE, QUERY_TILE, padded)
        layout.per_call[key] = torch.where(visible, 0.0, lowest(dtype)).to(dtype)
    return layout.per_call[key]


def own_keys_rows(
    rows: torch.Tensor,
    handle: LayerKV,
    layout: StepLayout,
    part: SuffixPart,
    index: int,
    scaling: float,
    window: int | None,
    span: tuple[int, int] | None = None,
):
    """Rows [a, b) of part `index` (`span`; None: all) against their own slots: o
    [(b - a) * width, kv, g, D] and lse in the part's padded token order. Each row's
    computation is the same whatever the span, so rows may be split between cores.

    The (kv head, row) pairs go kv-major: a gather from the pool `[kv, slots, D]` is then
    already `[kv * rows, hw, D]`, with no second copy to reorder it."""
    _, kv, g, d = rows.shape
    assert part.hw % OWN_BLOCK == 0, part.hw
    a, b = span if span is not None else (0, part.rows)
    n, width, hw = b - a, part.width, part.hw
    q = rows.index_select(0, part.tokens[a:b].reshape(-1)).view(n, width, kv, g, d)
    q = q.permute(2, 0, 1, 3, 4).reshape(kv * n, width, g, d)
    gather = part.gather[a * hw : b * hw]
    keys = handle.k.index_select(1, gather).view(kv * n, 1, hw, d)
    values = handle.v.index_select(1, gather).view(kv * n, 1, hw, d)
    tokens = own_tokens_per_item(width, g)
    if tokens > 1 and (
        packed_bias_bytes(kv * n, width, tokens, g, hw, rows.dtype) > PACKED_BIAS_BYTES
        or not packing_agrees(tokens, g, hw, d, rows.dtype)
    ):
        tokens = 1
    bias = _own_bias(layout, part, index, window, kv, rows.dtype, a, b, g, tokens)
    o, lse = own_keys_attention(q, keys, values, bias, scaling, tokens)
    o = o.reshape(kv, n, width, g, d).permute(1, 2, 0, 3, 4).reshape(n * width, kv, g, d)
    lse = lse.reshape(kv, n, width, g).permute(1, 2, 0, 3).reshape(n * width, kv, g)
    return o, lse


def keep_real(part: SuffixPart, o: torch.Tensor, lse: torch.Tensor):
    """The part's real tokens of its padded order (a prefill part pads its rows to one width)."""
    if part.width > 1:
        return o.index_select(0, part.real), lse.index_select(0, part.real)
    return o, lse


def _own_bias(layout: StepLayout, part: SuffixPart, index: int, window, kv, dtype, a, b, g, tokens):
    """Query i of row k, at slot first_slot[k] + i, sees key slot j when j <= its slot (and
    within the window): `[kv * (b - a), width, 1, hw]` for rows [a, b), kv-major; for items of
    `tokens` > 1 tokens, laid out as `attention.pack_bias` (built once per step, as the
    per-token one; `own_keys_rows` packs only under `attention.PACKED_BIAS_BYTES`)."""
    key = ("own", index, window, kv, dtype, a, b, g, tokens)
    if key not in layout.per_call:
        i = part.first_slot[a:b, None] + torch.arange(part.width, device=part.first_slot.device)
        j = torch.arange(part.hw, device=i.device)
        visible = j[None, None, :] <= i[:, :, None]
        if window is not None:
            visible &= (i[:, :, None] - j[None, None, :]) < window
        bias = torch.where(visible, 0.0, lowest(dtype)).to(dtype)[:, :, None]
        if tokens > 1:  # packed per row first, so that only the kv copies are materialised
            bias = pack_bias(bias, tokens, g)
        n, *rest = bias.shape
        layout.per_call[key] = bias[None].expand(kv, n, *rest).reshape(kv * n, *rest)
    return layout.per_call[key]
