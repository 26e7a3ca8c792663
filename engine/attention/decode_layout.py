"""The host side of the fixed-shape decode's tables: what `StaticDecode.load` (static_decode.py)
writes for one step, as one int64 array, computed from what changed since its previous step.

**The layout.** The FlexAttention call runs over query *slots*, `rows x Q_TILE` of them: tile t
is slots `[t * Q_TILE, (t + 1) * Q_TILE)`, one program per tile and head, iterating the pool
blocks its row of `kv_indices` lists. Rows of different groups never share a tile: a tile holds
up to `Q_TILE` rows of one group and lists that group's prefix blocks once and its rows' own
blocks, in logical order. So a one-row group's program walks exactly that row's keys, and a
group of arms reads its prefix once per tile (the step's attention work follows its tokens, not
a union of unrelated rows: benchmarks/decode_tables.py counts it). `slot_row` says which row
each slot computes (a tile's unfilled slots repeat its first row, whose output is dropped) and
`query_slot` where each row's output is read back. At most `rows` tiles are ever needed (one per
row, pad rows `Q_TILE` to a tile listing the scratch block); unused tiles list nothing.

**Ownership** of the rows' own blocks lives in two pool-wide tables, one entry per slot:
`slot_owner` (the row id holding its block) and `slot_pos` (its position in that row), read by
the mask for keys outside the prefix segments. A numpy mirror of them per block, and per row id
the block ids written for it, make an update cost the changes only: a row's new block, the
blocks of a row that left, and those of a row whose block list was replaced (a preemption), both
cleared where they still name that row (FlexAttention's eager reference reads every slot's
entry, listed or not). Clears come before writes, and each block is sent once, with its final
entry.
"""

from __future__ import annotations

import numpy as np

from nudgeability.engine.invariant.cuda.paged_tables import decode_parts
from nudgeability.engine.kv.kv_pool import SCRATCH_BLOCK
from nudgeability.engine.scheduling.step_plan import StepPlan
from nudgeability.engine.sequence import MAX_SEGMENTS

SCRATCH_OWNER = -2  # pad rows read (and write) only the scratch block
UNOWNED = -1
_I64 = np.int64


class _RowBlocks:
    """The block ids written to the tables for one row id: `listed` is the row's own `blocks`
    list object (the scheduler appends to it; a preemption replaces it), `known` how many of
    its entries `ids` holds (capacity doubles as the row grows), `last` the last of them as the
    list holds it (a first slot) and `view` `ids[:known]`."""

    __slots__ = ("listed", "known", "ids", "last", "view")

    def __init__(self, listed: list[int], ids: np.ndarray):
        self.listed, self.ids = listed, ids
        self.set_known(len(ids))

    def set_known(self, known: int) -> None:
        self.known, self.view = known, self.ids[:known]
        self.last = self.listed[known - 1] if known else None


class _GroupRuns:
    """A group's prefix as the tables see it: its segments' (start, end, offset) and the pool
    blocks they cover, in logical order, each once."""

    __slots__ = ("group", "key", "seg", "blocks", "length")

    def __init__(self, group, key: tuple, block_size: int):
        self.group, self.key = group, key
        self.length = sum(e - s for s, e, _ in key)
        self.seg = [v for triple in key for v in triple]
        self.seg += [0] * (3 * MAX_SEGMENTS - len(self.seg))
        spans = [np.arange(s // block_size, (e - 1) // block_size + 1) for s, e, _ in key]
        blocks = np.concatenate(spans).astype(_I64) if spans else np.zeros(0, _I64)
        _, first = np.unique(blocks, return_index=True)
        self.blocks = blocks[np.sort(first)]


class DecodeLayout:
    """The host mirror of one bucket's tables (`rows` rows, `tile` slots a tile, a pool of
    `num_blocks` blocks of `block_size`); `step(plan, pad_id)` lays a step out."""

    def __init__(self, rows: int, tile: int, num_blocks: int, block_size: int, paged=None):
        self.rows, self.tile, self.block_size = rows, tile, block_size
        self.paged = paged  # tokens per tile of the paged kernel, where it runs (StaticDecode)
        self.owner = np.full(num_blocks, UNOWNED, _I64)
        self.owner[SCRATCH_BLOCK] = SCRATCH_OWNER
        self.pos = np.zeros(num_blocks, _I64)
        self._rows: dict[int, _RowBlocks] = {}
        self._groups: dict[int, _GroupRuns] = {}
        self._scratch = np.array([SCRATCH_BLOCK], _I64)

    # --- ownership ------------------------------------------------------------------------------
    def _own(self, key: int, listed: list[int], writes: list, clears: list) -> np.ndarray:
        """Row `key`'s own block ids (a view), queueing the table entries that changed."""
        state = self._rows.get(key)
        count = len(listed)
        if state is not None and state.listed is listed:
            known = state.known
            if known <= count and (known == 0 or listed[known - 1] == state.last):
                if count > known:  # new blocks at the row's end
                    new = np.fromiter(listed[known:], _I64, count - known) // self.block_size
                    if count > len(state.ids):
                        grown = np.empty(max(count, 2 * len(state.ids)), _I64)
                        grown[:known] = state.view
                        state.ids = grown
                    state.ids[known:count] = new
                    writes.append((key, known, new))
                    state.set_known(count)
                return state.view
        if state is not None:  # a replaced list (a preemption), or one that shrank
            clears.append((key, state.view))
        ids = np.fromiter(listed, _I64, count) // self.block_size
        self._rows[key] = _RowBlocks(listed, ids)
        writes.append((key, 0, ids))
        return ids

    def _changes(self, writes: list, clears: list) -> np.ndarray:
        """Apply clears, then writes, to the mirror; the blocks whose entries changed."""
        changed = []
        for key, ids in clears:
            mine = ids[self.owner[ids] == key]
            self.owner[mine], self.pos[mine] = UNOWNED, 0
            changed.append(mine)
        for key, first, ids in writes:
            self.owner[ids] = key
            self.pos[ids] = np.arange(first, first + len(ids), dtype=_I64)
            changed.append(ids)
        if not changed:
            return np.zeros(0, _I64)
        return np.unique(np.concatenate(changed))

    def _runs(self, group) -> _GroupRuns:
        key = tuple((s.start, s.start + s.length, s.offset) for s in group.segments if s.length)
        runs = self._groups.get(group.id)
        if runs is None or runs.group is not group or runs.key != key:
            runs = _GroupRuns(group, key, self.block_size)
        return runs

    # --- one step -------------------------------------------------------------------------------
    def step(self, plan: StepPlan, pad_id: int) -> tuple[np.ndarray, list[int], int]:
        """The step's tables packed in one int64 array, the sizes of its parts and the tiles
        listed (the others list nothing). The parts: per row
        (input id, position, slot, row id, row slot, prefix length), the rows' segments
        (rows x 3 x MAX_SEGMENTS), `slot_row`, `query_slot`, `kv_num_blocks`, the listed tiles'
        `kv_indices` (tiles x width, where width is the part's size / listed tiles), and the
        slots of the blocks whose entries changed, with their owner and position in it."""
        bs, tile, rows = self.block_size, self.tile, self.rows
        n = len(plan.row_chunks)
        cols: list[list[int]] = [[] for _ in range(6)]
        ids, positions, slots, keys, row_slots, plens = cols
        segs: list[int] = []
        writes: list = []
        clears: list = []
        pieces: list[np.ndarray] = []
        counts: list[int] = []
        first_row: list[int] = []
        query_slot: list[int] = []
        current, fill, seen, groups = None, tile, set(), {}
        paged_rows = []
        for i, (row, s0, _) in enumerate(plan.row_chunks):
            group = row.group
            if group is not current or fill == tile:  # a new tile
                if group is not current:
                    runs, current = self._runs(group), group
                    groups[group.id] = runs
                pieces.append(runs.blocks)
                counts.append(len(runs.blocks))
                first_row.append(i)
                fill = 0
            query_slot.append((len(counts) - 1) * tile + fill)
            fill += 1
            own = self._own(row.id, row.blocks, writes, clears)
            pieces.append(own)
            counts[-1] += len(own)
            seen.add(row.id)
            paged_rows.append((runs.key, own, s0))
            ids.append(row.context[s0])
            positions.append(runs.length + s0)
            slots.append(row.slot(s0, bs))
            keys.append(row.id)
            row_slots.append(s0)
            plens.append(runs.length)
            segs += runs.seg
        for key in [k for k in self._rows if k not in seen]:  # rows that left
            clears.append((key, self._rows.pop(key).view))
        self._groups = groups
        for i in range(n, rows):  # pad rows, `tile` to a tile of the scratch block
            if (i - n) % tile == 0:
                pieces.append(self._scratch)
                counts.append(1)
                first_row.append(i)
            query_slot.append((len(counts) - 1) * tile + (i - n) % tile)
            ids.append(pad_id)
            positions.append(0)
            slots.append(SCRATCH_BLOCK * bs + i % bs)
            keys.append(SCRATCH_OWNER)
            row_slots.append(bs - 1)
            plens.append(0)
        segs += [0] * (3 * MAX_SEGMENTS * (rows - n))
        listed = len(counts)
        slot_row = np.zeros(rows * tile, _I64)
        slot_row[: listed * tile] = np.repeat(np.asarray(first_row, _I64), tile)
        slot_row[query_slot] = np.arange(rows, dtype=_I64)
        count = np.zeros(rows, _I64)
        count[:listed] = counts
        width = max(counts)
        flat = np.concatenate(pieces)
        starts = np.cumsum(count[:listed]) - count[:listed]
        where = np.arange(len(flat), dtype=_I64) + np.repeat(
            np.arange(listed, dtype=_I64) * width - starts, count[:listed]
        )
        indices = np.full(listed * width, SCRATCH_BLOCK, _I64)
        indices[where] = flat
        changed = self._changes(writes, clears)
        within = np.arange(bs, dtype=_I64)
        parts = [
            np.asarray(ids + positions + slots + keys + row_slots + plens, _I64),
            np.asarray(segs, _I64),
            slot_row,
            np.asarray(query_slot, _I64),
            count,
            indices,
            (changed[:, None] * bs + within).reshape(-1),
            np.repeat(self.owner[changed], bs),
            (self.pos[changed][:, None] * bs + within).reshape(-1),
        ]
        if self.paged:  # the paged kernel's tables
            parts += decode_parts(paged_rows, rows, self.paged)
        return np.concatenate(parts), [len(p) for p in parts], listed
