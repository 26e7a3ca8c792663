"""Decode steps with fixed shapes, for CUDA graphs: one FlexAttention call per layer over the pool.

A step whose rows all feed one token can run with every tensor's shape fixed by a bucket: the
rows are padded to `BUCKETS` (16, 32, 64, ...), and attention becomes one `flex_attention` call per
layer, queries `[1, H, rows, D]` against the whole pool `[1, kv, slots, D]`, with a block mask that
lists, for each tile of 16 rows, the pool blocks its rows may read (their groups' prefix runs,
once per tile however many arms share them, and the rows' own blocks), and a mask function that
keeps, within those blocks, exactly the keys of each row: its prefix segments and the slots of
its own blocks up to its own (sliding windows included). One softmax covers prefix and suffix,
so nothing needs merging.

`StaticDecode` owns a bucket's buffers: the host writes a step's tables into them (one pinned
copy), and the same kernels then run on the same addresses every step, which is what a CUDA
graph replays (`capture`, CUDA only). The pool-wide tables `slot_owner` / `slot_pos` (which row
owns a slot, and at which position) are updated for the blocks rows take. On CPU the same
buffers run eagerly (`Engine(static_decode=True)`), so the tests check every table and mask here,
though not the capture.
"""

from __future__ import annotations

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from nudgeability.engine.kv_pool import SCRATCH_BLOCK
from nudgeability.engine.scheduler import StepPlan

BUCKETS = (16, 32, 64, 128, 256)
MAX_SEGMENTS = 3  # a shared run, the rest of the prompt, a stem
Q_TILE = 16  # rows per tile of the block mask (the least Triton's flex kernel takes)
SCRATCH_OWNER = -2  # pad rows read (and write) only the scratch block


class StaticDecode:
    """The fixed buffers of one bucket of `rows` decode rows (module docstring)."""

    def __init__(self, rows: int, pool, device, block_size: int):
        self.rows, self.pool, self.device, self.block_size = rows, pool, device, block_size
        blocks = pool.num_blocks
        self.tiles = -(-rows // Q_TILE)

        def zeros(*shape, dtype=torch.long):
            return torch.zeros(*shape, dtype=dtype, device=device)

        self.input_ids = zeros(1, rows)
        self.positions = zeros(1, rows)
        self.slots = zeros(rows)
        self.row_key = zeros(rows)
        self.row_slot = zeros(rows)
        self.prefix_len = zeros(rows)
        # per row and prefix segment: (first slot, end slot, position of the first token)
        self.seg = zeros(rows, MAX_SEGMENTS, 3)
        self.kv_num_blocks = zeros(1, 1, self.tiles, dtype=torch.int32)
        self.kv_indices = zeros(1, 1, self.tiles, blocks, dtype=torch.int32)
        self.slot_owner = torch.full((blocks * block_size,), -1, dtype=torch.long, device=device)
        self.slot_pos = zeros(blocks * block_size)
        self.slot_owner[SCRATCH_BLOCK * block_size : (SCRATCH_BLOCK + 1) * block_size] = (
            SCRATCH_OWNER
        )
        self._owned: dict[int, int] = {}  # block -> row key written into the tables
        self.per_call: dict = {}
        # what the engine's accounting reads of a layout
        self.prefix_chunks, self.row_start, self.row_end, self.tokens = [], 0, rows, rows
        self.sample_index = torch.arange(0, device=device)

    # --- host -> buffers ------------------------------------------------------------------------
    def load(self, plan: StepPlan, pad_id: int) -> int:
        """Write a decode step's tables into the buffers; returns its real rows."""
        bs = self.block_size
        ids, pos, slots, keys, row_slots, plens, segs = [], [], [], [], [], [], []
        owner_slots, owner_keys, owner_pos = [], [], []
        tiles: list[set[int]] = [set() for _ in range(self.tiles)]
        for i, (row, s0, _) in enumerate(plan.row_chunks):
            group = row.group
            ids.append(row.context[s0])
            pos.append(group.prefix_len + s0)
            slots.append(row.slot(s0, bs))
            keys.append(row.id)
            row_slots.append(s0)
            plens.append(group.prefix_len)
            runs = [s for s in group.segments if s.length]
            seg = [(s.start, s.start + s.length, s.offset) for s in runs]
            seg += [(0, 0, 0)] * (MAX_SEGMENTS - len(seg))
            segs += [v for triple in seg for v in triple]
            visible = {
                b for s in runs for b in range(s.start // bs, (s.start + s.length - 1) // bs + 1)
            }
            for j, first in enumerate(row.blocks):
                block = first // bs
                visible.add(block)
                if self._owned.get(block) != row.id:
                    self._owned[block] = row.id
                    owner_slots += range(first, first + bs)
                    owner_keys += [row.id] * bs
                    owner_pos += range(j * bs, (j + 1) * bs)
            tiles[i // Q_TILE] |= visible
        n = len(ids)
        for i in range(n, self.rows):  # pad rows: the scratch block only
            ids.append(pad_id)
            pos.append(0)
            slots.append(SCRATCH_BLOCK * bs + i % bs)
            keys.append(SCRATCH_OWNER)
            row_slots.append(bs - 1)
            plens.append(0)
            segs += [0] * (3 * MAX_SEGMENTS)
            tiles[i // Q_TILE].add(SCRATCH_BLOCK)
        counts = [len(t) for t in tiles]
        indices = []
        for t in tiles:
            listed = sorted(t)
            indices += listed + [0] * (self.kv_indices.shape[-1] - len(listed))
        host = torch.tensor(
            ids
            + pos
            + slots
            + keys
            + row_slots
            + plens
            + segs
            + counts
            + indices
            + owner_slots
            + owner_keys
            + owner_pos,
            dtype=torch.long,
        )
        if self.device.type == "cuda":
            host = host.pin_memory()
        values = host.to(self.device, non_blocking=True)
        r = self.rows
        parts = torch.split(
            values,
            [r] * 6 + [3 * MAX_SEGMENTS * r, self.tiles, len(indices)] + [len(owner_slots)] * 3,
        )
        for buffer, part in zip(
            (
                self.input_ids.view(-1),
                self.positions.view(-1),
                self.slots,
                self.row_key,
                self.row_slot,
                self.prefix_len,
                self.seg.view(-1),
            ),
            parts,
        ):
            buffer.copy_(part)
        self.kv_num_blocks.view(-1).copy_(parts[7])
        self.kv_indices.view(-1).copy_(parts[8])
        if owner_slots:
            where = parts[9]
            self.slot_owner.index_copy_(0, where, parts[10])
            self.slot_pos.index_copy_(0, where, parts[11])
        for key in [k for k in self.per_call if k[0] == "write"]:
            del self.per_call[key]
        self.row_end = n
        self.sample_index = torch.arange(n, device=self.device)
        return n

    def write_index(self, kv: int, pool_slots: int) -> torch.Tensor:
        """As `StepLayout.write_index`: computed from the slots buffer by device ops, once per step
        and head count (inside a captured graph, once per replay)."""
        key = ("write", kv, pool_slots)
        if key not in self.per_call:
            heads = torch.arange(kv, device=self.device)
            self.per_call[key] = (heads[None, :] * pool_slots + self.slots[:, None]).reshape(-1)
        return self.per_call[key]

    # --- attention --------------------------------------------------------------------------------
    def block_mask(self, window: int | None) -> BlockMask:
        """The step's block mask for layers with `window` (None: full attention)."""
        key = ("mask", window)
        if key in self.per_call:
            return self.per_call[key]
        owner, spos, rkey, rslot, plen, seg = (
            self.slot_owner,
            self.slot_pos,
            self.row_key,
            self.row_slot,
            self.prefix_len,
            self.seg,
        )

        def mask_mod(b, h, q, kv):
            qpos = plen[q] + rslot[q]
            visible = (owner[kv] == rkey[q]) & (spos[kv] <= rslot[q])
            if window is not None:
                visible = visible & (rslot[q] - spos[kv] < window)
            for j in range(MAX_SEGMENTS):
                inside = (kv >= seg[q, j, 0]) & (kv < seg[q, j, 1])
                if window is not None:
                    inside = inside & (qpos - (seg[q, j, 2] + kv - seg[q, j, 0]) < window)
                visible = visible | inside
            return visible

        slots = self.pool.num_blocks * self.block_size
        mask = BlockMask.from_kv_blocks(
            self.kv_num_blocks,
            self.kv_indices,
            BLOCK_SIZE=(Q_TILE, self.block_size),
            mask_mod=mask_mod,
            seq_lengths=(self.rows, slots),
        )
        self.per_call[key] = mask
        return mask


_compiled = None


def flex_decode_attention(q, handle, scaling: float, window: int | None) -> torch.Tensor:
    """[1, H, rows, D] -> [1, rows, H, D]: every decode row over its keys in the pool, one call."""
    global _compiled
    layout = handle.layout
    keys, values = handle.k.unsqueeze(0), handle.v.unsqueeze(0)
    run = flex_attention
    if q.device.type == "cuda":  # the fused kernel is compiled; on CPU the eager reference runs
        if _compiled is None:
            _compiled = torch.compile(flex_attention, dynamic=False)
        run = _compiled
    out = run(q, keys, values, block_mask=layout.block_mask(window), scale=scaling, enable_gqa=True)
    return out.transpose(1, 2)


class GraphedDecode:
    """CUDA graphs of the decode forward, one per bucket, captured on first use (CUDA only)."""

    def __init__(self, forward):
        self.forward = forward
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}

    def run(self, cache, static: StaticDecode) -> torch.Tensor:
        entry = self.graphs.get(static.rows)
        if entry is None:
            # Warm up (compiles the flex kernel for this bucket) on a side stream, then capture.
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self.forward(cache, static.input_ids, static.positions)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                hidden = self.forward(cache, static.input_ids, static.positions)
            entry = self.graphs[static.rows] = (graph, hidden)
        graph, hidden = entry
        graph.replay()
        return hidden
