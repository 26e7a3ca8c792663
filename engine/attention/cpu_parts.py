"""A step's three kinds of attention on CPU, each through the fixed-shape calls of `fixed_shape.py`.

`shared_prefix_attention.py` says what each part attends to; this module lays each one out so
that no query's kernel call depends on what else runs in the step:

- `prefix_chunk`: a prefix chunk's queries against their run, causal (and windowed). The query
  rows are (token, head) pairs in 16-row tiles aligned to the run's start, the keys 512-key
  blocks aligned to the run's position 0: a query sees the same tiles and blocks whatever the
  chunking (a block outside its reach is all hidden, which changes nothing);
- `prefix_segment`: row tokens against one prefix segment, folded into 16-row tiles (the groups
  that share the segment in one call: `cpu_rows.py`);
- `own_keys_rows`: each row token against its own row's slots, one token per kernel item, in spans
  of rows that the cores share (`keep_real` then drops a prefill part's padding).

Masks are built once per step and window and cached in `layout.per_call`, shared by every layer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nudgeability.engine.attention.fixed_shape import (
    OWN_BLOCK,
    QUERY_TILE,
    SHARED_BLOCK,
    lowest,
    own_keys_attention,
    pad_keys,
    segment_width,
    shared_keys_attention,
)
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
    """Chunk `index` of the step, q [1, H, T, D] (the step's): its [1, L, H, D] output."""
    kv = handle.k.shape[0]
    _, h, _, d = q.shape
    g = h // kv
    length = chunk.c1 - chunk.c0
    # HF's head h reads kv head h // g: the rows are (token, head) in token order
    qc = q[0, :, chunk.t0 : chunk.t1].reshape(kv, g, length, d)
    folded = qc.permute(0, 2, 1, 3).reshape(kv, length * g, d)
    lead = (chunk.c0 * g) % QUERY_TILE
    first = 0 if window is None else max(0, chunk.c0 - window + 1)
    k0 = first // SHARED_BLOCK * SHARED_BLOCK
    k1 = -(-chunk.c1 // SHARED_BLOCK) * SHARED_BLOCK
    keys = F.pad(handle.k[:, chunk.start + k0 : chunk.start + chunk.c1], (0, 0, 0, k1 - chunk.c1))
    values = F.pad(handle.v[:, chunk.start + k0 : chunk.start + chunk.c1], (0, 0, 0, k1 - chunk.c1))
    bias = _chunk_bias(layout, index, chunk, g, lead, k0, k1, window, q.dtype)
    out, _ = shared_keys_attention(folded, keys, values, bias, scaling, lead)
    return out.view(kv, length, g, d).permute(1, 0, 2, 3).reshape(1, length, h, d)


def _chunk_bias(layout, index, chunk, g, lead, k0, k1, window, dtype) -> torch.Tensor:
    """[1, tiles, 16, k1 - k0]: folded row r (position (c0 * g - lead + r) // g) sees key
    position p when p <= its position (and within the window)."""
    key = ("chunk", index, window, g, dtype)
    if key not in layout.per_call:
        device = layout.slots.device
        total = -(-(lead + (chunk.c1 - chunk.c0) * g) // QUERY_TILE) * QUERY_TILE
        qpos = (chunk.c0 * g - lead + torch.arange(total, device=device)) // g
        kpos = torch.arange(k0, k1, device=device)
        visible = kpos[None, :] <= qpos[:, None]
        if window is not None:
            visible &= (qpos[:, None] - kpos[None, :]) < window
        bias = torch.where(visible, 0.0, lowest(dtype)).to(dtype)
        layout.per_call[key] = bias.view(1, total // QUERY_TILE, QUERY_TILE, k1 - k0)
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
    both give the same bits (tests/engine/test_fixed_shape_attention.py), and the in-place read
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
    bias = _own_bias(layout, part, index, window, kv, rows.dtype, a, b)
    o, lse = own_keys_attention(q, keys, values, bias, scaling)
    o = o.view(kv, n, width, g, d).permute(1, 2, 0, 3, 4).reshape(n * width, kv, g, d)
    lse = lse.view(kv, n, width, g).permute(1, 2, 0, 3).reshape(n * width, kv, g)
    return o, lse


def keep_real(part: SuffixPart, o: torch.Tensor, lse: torch.Tensor):
    """The part's real tokens of its padded order (a prefill part pads its rows to one width)."""
    if part.width > 1:
        return o.index_select(0, part.real), lse.index_select(0, part.real)
    return o, lse


def _own_bias(layout: StepLayout, part: SuffixPart, index: int, window, kv, dtype, a, b):
    """Query i of row k, at slot first_slot[k] + i, sees key slot j when j <= its slot (and
    within the window): `[kv * (b - a), width, 1, hw]` for rows [a, b), kv-major."""
    key = ("own", index, window, kv, dtype, a, b)
    if key not in layout.per_call:
        i = part.first_slot[a:b, None] + torch.arange(part.width, device=part.first_slot.device)
        j = torch.arange(part.hw, device=i.device)
        visible = j[None, None, :] <= i[:, :, None]
        if window is not None:
            visible &= (i[:, :, None] - j[None, None, :]) < window
        bias = torch.where(visible, 0.0, lowest(dtype)).to(dtype)
        n, width, hw = bias.shape
        layout.per_call[key] = bias[None].expand(kv, n, width, hw).reshape(kv * n, width, 1, hw)
    return layout.per_call[key]
