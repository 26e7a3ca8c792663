"""A step's row tokens on CPU: every prefix segment read once for all the groups that share it,
the own keys in spans of rows, all dealt to the cores, then merged per group.

Groups share prefix segments: the bases of one condition all start with the same shared start
(system prompt, tool declaration, demonstration: `splice/experiment/shared_start.py`), and every
fork of those bases starts with it too. Computed group by group, a group of one row (a base)
folds its g query heads into a 16-row tile that is mostly padding, and reads the shared start's
keys again for every group. Here the query rows of every group that reads the same segment
(same pool slots, same length, same positions) are folded into one call: the keys are read once,
and the tiles are full.

This changes no bit. A segment call is the fixed-shape kernel of `attention.shared_keys_attention`
(16-row query tiles, 512-key blocks), whose tiles are independent kernel items; what a joint
call changes is only which rows share a tile and where a row sits in it, which is what any
change of a group's arms already does, and which `engine/invariant/needle.py` checks on the
machine before the runner relies on it. A sliding layer's segment bias depends on its query
rows' positions, so there each group keeps its own call.

The pieces (each segment call in spans of whole tiles, the own keys in spans of rows) are dealt
to the cores by `engine/invariant/cpu/cores.Cores.share`; each piece is the same calls on whichever core
runs it. The merges then run per group in segment order, as `_prefix_attention` in
`shared_prefix_attention.py` merges them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from nudgeability.engine.attention import cpu_attention
from nudgeability.engine.invariant.cpu.attention import QUERY_TILE, merge, segment_width
from nudgeability.engine.invariant.cpu.cores import CORES
from nudgeability.engine.kv.kv_cache import LayerKV
from nudgeability.engine.scheduling.step_layout import GroupSpan, StepLayout


@dataclass
class SegmentCall:
    """One read of `keys` prefix keys from pool slot `start` (position `first`), for the query
    rows of every member `(group, segment)`, folded in member order."""

    start: int
    first: int
    keys: int
    members: list[tuple[int, int]] = field(default_factory=list)


def segment_calls(layout: StepLayout, window: int | None) -> list[SegmentCall]:
    """The step's prefix reads for this layer kind: one per distinct segment (per group and
    segment on a sliding layer), in order of first use."""
    calls: dict[tuple, SegmentCall] = {}
    for i, span in enumerate(layout.groups):
        for j, (start, length, offset) in enumerate(span.segments):
            # On a sliding layer, keys before prefix_len - window + 1 are hidden from every row
            # token: the view starts there, fixed by the group alone.
            lo = 0 if window is None else max(0, span.prefix_len - window + 1 - offset)
            if lo >= length:
                continue  # the window hides the whole segment from every query
            key = (start + lo, offset + lo, length - lo) + (() if window is None else (i, j))
            calls.setdefault(key, SegmentCall(start + lo, offset + lo, length - lo)).members.append(
                (i, j)
            )
    return list(calls.values())


def row_parts(rows: torch.Tensor, handle: LayerKV, layout: StepLayout, scaling, window):
    """Every part of the step's row tokens: each suffix part's (o, lse) over its own keys (the
    `computed` of `_suffix_attention`) and each group's merged prefix (o [n, kv, g, D], lse
    [n, kv, g]) or None."""
    _, kv, g, d = rows.shape
    work, costs = [], []
    own: dict = {}

    def own_piece(index, part, span):
        return lambda: own.__setitem__(
            (index, span),
            cpu_attention.own_keys_rows(rows, handle, layout, part, index, scaling, window, span),
        )

    spans = [CORES.spans(part.rows) for part in layout.parts]
    for index, part in enumerate(layout.parts):
        for a, b in spans[index]:
            work.append(own_piece(index, part, (a, b)))
            costs.append(float((b - a) * part.width * g * part.hw))

    calls = segment_calls(layout, window)
    read: list[dict] = [{} for _ in calls]  # per call: first row of a piece -> its (o, lse)

    def segment_piece(c, call, folded, span, r0, r1):
        return lambda: read[c].__setitem__(
            r0,
            cpu_attention.prefix_segment(
                folded[:, r0:r1],
                handle,
                layout,
                span,
                ("read", c),
                call.start,
                call.first,
                call.keys,
                scaling,
                window,
                g,
            ),
        )

    for c, call in enumerate(calls):
        groups = [layout.groups[i] for i, _ in call.members]
        folded = _fold(rows, groups)
        total = folded.shape[1]
        tiles = -(-total // QUERY_TILE)
        padded = segment_width(call.keys)
        # a sliding layer's bias covers the group's tiles: one piece; else whole tiles per core
        cuts = [(0, tiles)] if window is not None else CORES.spans(tiles)
        for t0, t1 in cuts:
            r0, r1 = t0 * QUERY_TILE, min(t1 * QUERY_TILE, total)
            work.append(segment_piece(c, call, folded, groups[0], r0, r1))
            costs.append(float((t1 - t0) * QUERY_TILE * padded))
    CORES.share(work, costs)

    computed = []
    for index, part in enumerate(layout.parts):
        got = [own[(index, span)] for span in spans[index]]
        o = torch.cat([o for o, _ in got]) if len(got) > 1 else got[0][0]
        lse = torch.cat([x for _, x in got]) if len(got) > 1 else got[0][1]
        computed.append(cpu_attention.keep_real(part, o, lse))
    return computed, _merge_groups(layout, calls, read, kv, g, d)


def _fold(rows: torch.Tensor, groups: list[GroupSpan]) -> torch.Tensor:
    """The groups' row tokens as query rows `[kv, sum(n * g), D]`: (token, head) pairs in token
    order, group after group."""
    _, kv, g, d = rows.shape
    parts = [
        rows[s.a0 : s.a1].permute(1, 0, 2, 3).reshape(kv, (s.a1 - s.a0) * g, d) for s in groups
    ]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


def _merge_groups(layout: StepLayout, calls, read, kv: int, g: int, d: int) -> list:
    """Each group's prefix output in the row view, its segments merged in segment order.

    The merges of every group at the same depth run as one call over their rows: a merge is
    elementwise, and `attention.per_row` lays each row out alike whatever the row count, so a
    row's merge gives the bits it gives alone (and a step of many one-row groups, the bases,
    does not pay a dozen small ops per group and layer on one core)."""
    segments: dict[int, list] = {}  # group -> [(segment, o, lse)] in the row view
    for c, call in enumerate(calls):
        pieces = [read[c][r0] for r0 in sorted(read[c])]
        if len(pieces) > 1:
            o = torch.cat([o for o, _ in pieces], dim=1)
            lse = torch.cat([x for _, x in pieces], dim=1)
        else:
            o, lse = pieces[0]
        at = 0
        for i, j in call.members:
            span = layout.groups[i]
            n = span.a1 - span.a0
            rows_o = o[:, at : at + n * g].reshape(kv, n, g, d).permute(1, 0, 2, 3)
            rows_lse = lse[:, at : at + n * g].reshape(kv, n, g).permute(1, 0, 2)
            segments.setdefault(i, []).append((j, rows_o, rows_lse))
            at += n * g
    merged = {}
    for i, got in segments.items():
        got.sort(key=lambda s: s[0])
        merged[i] = got[0][1:]
    depth = 1
    while level := [i for i in sorted(segments) if len(segments[i]) > depth]:
        sides = [merged[i] for i in level], [segments[i][depth][1:] for i in level]
        if len(level) == 1:
            merged[level[0]] = merge(*sides[0][0], *sides[1][0], with_lse=True)
        else:
            o, lse = merge(
                *(torch.cat([side[k] for side in group]) for group in sides for k in (0, 1)),
                with_lse=True,
            )
            at = 0
            for i in level:
                n = layout.groups[i].a1 - layout.groups[i].a0
                merged[i] = (o[at : at + n], lse[at : at + n])
                at += n
        depth += 1
    return [merged.get(i) for i in range(len(layout.groups))]
