"""Decode steps with fixed shapes, for CUDA graphs: one FlexAttention call per layer over the pool.

A step's rows that feed one token can run with every tensor's shape fixed by a bucket: the
rows are padded to a bucket (`decode_buckets.py`: 16, 32, 64, ... 512 or the row cap), and
attention becomes one `flex_attention` call per layer over the whole pool `[1, kv, slots, D]`.
The queries `[1, H, rows, D]` are first scattered into tiles of `Q_TILE` slots that each hold
rows of one group only (`decode_layout.py`), so each program walks its group's prefix once and
its own rows' blocks, not the union of unrelated rows' blocks; the output is gathered back to row
order. A mask function keeps, within the listed blocks, exactly the keys of each row: its prefix
segments and the slots of its own blocks up to its own (sliding windows included). One softmax
covers prefix and suffix, so nothing needs merging.

`StaticDecode` owns a bucket's buffers: the host writes a step's tables into them (one copy of
what changed since its previous step), and the same kernels then run on the same addresses every
step, which is what a CUDA graph replays (`graphed_decode.py`, CUDA only). Every tensor the
forward reads is one of these buffers, updated in place by `load()` and never reallocated, the
pool or the model's weights (tests/helpers/capture_hazards.py checks this on CPU).

Opt-in on CUDA (`Engine(static_decode=True)`): Inductor's FlexAttention lowering needs a GPU, so
the test suite cannot run it. What this module controls of it follows the lowering's rules (`kernel_options`): the main
kernel is forced (the decode kernel has its own block rule, which depends on the GQA ratio), with
`BLOCK_M = Q_TILE` and a `BLOCK_N` that divides the pool's block size, so the block mask's Q
block is a multiple of BLOCK_M and its KV block (the pool block) of BLOCK_N for every bucket and
head shape (tests/engine/attention/test_flex_block_rules.py). On CPU the same buffers run FlexAttention's
eager reference (`Engine(static_decode=True)`), so the tests check every table and mask on CPU,
though not the compiled kernel or the capture (benchmarks/gpu_check.py runs those on a GPU).
"""

from __future__ import annotations

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from nudgeability.engine.attention.decode_layout import (
    SCRATCH_OWNER,
    UNOWNED,
    DecodeLayout,
)
from nudgeability.engine.invariant.cuda.paged_tables import decode_buffers
from nudgeability.engine.kv.kv_pool import SCRATCH_BLOCK
from nudgeability.engine.scheduling.step_plan import StepPlan
from nudgeability.engine.sequence import MAX_SEGMENTS
from nudgeability.util import fallbacks

# Query slots per tile of the block mask, and the main kernel's BLOCK_M: a power of two
# (FlexKernelOptions' contract) and Triton's smallest dot tile. A tile holds rows of one group
# only, so in the base phase (every row its own group) a tile computes one row: the smallest tile
# wastes the least.
Q_TILE = 16
BLOCK_N_CHOICES = (64, 32, 16)  # powers of two >= 16, largest first
COMPILE_LIMIT = 64  # Dynamo compiles allowed for the flex call (buckets x windows x head shapes)


def kernel_options(head_dim: int, block_size: int) -> dict | None:
    """The FlexAttention kernel options of a layer with `head_dim` over a pool of `block_size`.

    Inductor's lowering (torch/_inductor/kernel/flex/flex_attention.py) takes BLOCK_M / BLOCK_N
    from these options before its own configs, and rejects a config unless the block mask's Q
    block is a multiple of BLOCK_M and its KV block of BLOCK_N. `FORCE_USE_FLEX_ATTENTION` keeps
    it off the decode kernel (torch/_inductor/kernel/flex/flex_decoding.py), which would set
    BLOCK_M from rows x GQA ratio.
    Above head_dim 128, BLOCK_N stays at 32 like torch's own large-head defaults. None when no
    BLOCK_N divides the block size (`refusal` keeps such an engine off the compiled path; the
    eager reference on CPU takes any block size)."""
    cap = 64 if head_dim <= 128 else 32
    block_n = next((n for n in BLOCK_N_CHOICES if n <= cap and block_size % n == 0), None)
    if block_n is None:
        return None
    return {
        "FORCE_USE_FLEX_ATTENTION": True,
        "BLOCK_M": Q_TILE,
        "BLOCK_N": block_n,
        "num_warps": 4,
        "num_stages": 3 if head_dim <= 128 else 2,
    }


def refusal(block_size: int, head_dims) -> str | None:
    """Why the compiled FlexAttention decode cannot take this engine's shapes, or None.

    The pool block is the block mask's KV block, so it must be a multiple of a BLOCK_N the kernel
    takes (a power of two >= 16); the lowering raises below head_dim 16."""
    if block_size % 16:
        return f"block_size {block_size} is not a multiple of 16 (no Triton BLOCK_N divides it)"
    small = [d for d in head_dims if d < 16]
    if small:
        return f"head_dim {small[0]} < 16 (FlexAttention's Triton kernel needs at least 16)"
    return None


def head_dims(model) -> set[int]:
    """The attention head sizes of an HF `model` (Gemma 4's global layers have their own)."""
    text = model.config.get_text_config()
    dims = {getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads}
    if getattr(text, "global_head_dim", None):
        dims.add(text.global_head_dim)
    return dims


class StaticDecode:
    """The fixed buffers of one bucket of `rows` decode rows (module docstring)."""

    def __init__(self, rows: int, pool, device, block_size: int, paged: int | None = None):
        """`paged`: tokens per tile of the paged kernel where it runs instead of FlexAttention
        (engine/invariant/cuda/mode.py); its tables are then buffers here too."""
        self.rows, self.pool, self.device, self.block_size = rows, pool, device, block_size
        blocks = pool.num_blocks
        self.tiles = rows  # a tile per row at most (decode_layout.py)

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
        self.slot_row = zeros(rows * Q_TILE)  # the row each query slot computes
        self.query_slot = zeros(rows)  # the query slot whose output is the row's
        self.kv_num_blocks = zeros(1, 1, self.tiles, dtype=torch.int32)
        self.kv_indices = zeros(1, 1, self.tiles, blocks, dtype=torch.int32)
        # per pool slot: the row id whose own block holds it, and its position in that row
        slots = blocks * block_size
        self.slot_owner = torch.full((slots,), UNOWNED, dtype=torch.long, device=device)
        self.slot_owner[SCRATCH_BLOCK * block_size : (SCRATCH_BLOCK + 1) * block_size] = (
            SCRATCH_OWNER
        )
        self.slot_pos = zeros(slots)
        self.host = DecodeLayout(rows, Q_TILE, blocks, block_size, paged)  # the tables' host mirror
        self.paged = None
        if paged:
            self.paged = decode_buffers(rows, paged, blocks, block_size, device)
        self._staging: torch.Tensor | None = None  # pinned host memory for the copy (CUDA)
        self._copied = None  # the event after the last copy out of `_staging`
        # per kv head count: the pool rows (head-major) the step's K/V go to, written by load()
        self.write_rows: dict[int, torch.Tensor] = {}
        self._head_base: dict[int, torch.Tensor] = {}
        self.masks: dict = {}  # window -> BlockMask over the buffers above, built once
        self.per_call: dict = {}  # (kept empty: nothing a step reads may live only one step)
        # what the engine's accounting reads of a layout
        self.prefix_chunks, self.row_start, self.row_end, self.tokens = [], 0, rows, rows
        self._all_rows = torch.arange(rows, device=device)
        self.sample_index = self._all_rows[:0]

    def buffers(self) -> list[torch.Tensor]:
        """Every tensor the forward reads from this object: a CUDA graph replays on these
        addresses, so `load()` only ever writes into them."""
        fixed = [
            self.input_ids,
            self.positions,
            self.slots,
            self.row_key,
            self.row_slot,
            self.prefix_len,
            self.seg,
            self.slot_row,
            self.query_slot,
            self.kv_num_blocks,
            self.kv_indices,
            self.slot_owner,
            self.slot_pos,
        ]
        if self.paged is not None:
            fixed += [self.paged.prefix_tokens, self.paged.prefix_sources, self.paged.own_tokens]
            fixed += [self.paged.own_sources, self.paged.tables]
        return fixed + list(self.write_rows.values()) + list(self._head_base.values())

    # --- host -> buffers ------------------------------------------------------------------------
    def load(self, plan: StepPlan, pad_id: int) -> int:
        """Write a decode step's tables into the buffers; returns its real rows.

        Host work is O(rows + blocks listed + blocks whose owner changed), never O(pool), and
        vectorised past one pass over the rows (`decode_layout.DecodeLayout.step`); one copy
        to the device."""
        packed, sizes, listed = self.host.step(plan, pad_id)
        parts = torch.split(self._send(packed), sizes)
        r = self.rows
        columns = (
            self.input_ids.view(-1),
            self.positions.view(-1),
            self.slots,
            self.row_key,
            self.row_slot,
            self.prefix_len,
        )
        for buffer, part in zip(columns, parts[0].view(len(columns), r)):
            buffer.copy_(part)
        self.seg.view(-1).copy_(parts[1])
        self.slot_row.copy_(parts[2])
        self.query_slot.copy_(parts[3])
        self.kv_num_blocks.view(-1).copy_(parts[4])
        width = sizes[5] // listed
        self.kv_indices[0, 0, :listed, :width].copy_(parts[5].view(listed, width))
        if sizes[6]:
            self.slot_owner.index_copy_(0, parts[6], parts[7])
            self.slot_pos.index_copy_(0, parts[6], parts[8])
        if self.paged is not None:
            self._load_paged(parts[9:], len(plan.row_chunks))
        for kv, rows_out in self.write_rows.items():  # in place: a graph holds these addresses
            torch.add(self._head_base[kv], self.slots[:, None], out=rows_out.view(r, kv))
        n = self.row_end = len(plan.row_chunks)
        # the rows that choose a token (`StepPlan.sampling`): no stem row, nor a one-token
        # prefill chunk short of its context's end
        picked = plan.sampling_positions()
        if len(picked) == n:
            self.sample_index = self._all_rows[:n]
        else:
            self.sample_index = torch.tensor(picked, dtype=torch.long).to(self.device)
        return n

    def _load_paged(self, parts, real: int) -> None:
        """The paged kernel's tables of the step (paged_tables.decode_parts) into its buffers:
        the `real` rows' block tables only (a pad row's own tile reads none)."""
        tokens, sources, own_tokens, own, tables = parts
        self.paged.prefix_tokens.view(-1).copy_(tokens)
        self.paged.prefix_sources.view(-1).copy_(sources)
        self.paged.own_tokens.view(-1).copy_(own_tokens)
        self.paged.own_sources.view(-1).copy_(own)
        if real:  # a capture's warm-up step has pad rows only
            width = tables.numel() // real
            self.paged.tables[:real, :width].copy_(tables.view(real, width))

    def _send(self, packed) -> torch.Tensor:
        """`packed` (int64 numpy) on the device: on CUDA through one pinned buffer, reused once
        its previous copy is done."""
        host = torch.from_numpy(packed)
        if self.device.type != "cuda":
            return host
        if self._staging is None or self._staging.numel() < host.numel():
            size = max(host.numel(), 2 * (0 if self._staging is None else self._staging.numel()))
            self._staging = torch.empty(size, dtype=torch.long, pin_memory=True)
        elif self._copied is not None:
            self._copied.synchronize()
        stage = self._staging[: host.numel()]
        stage.copy_(host)
        values = stage.to(self.device, non_blocking=True)
        self._copied = torch.cuda.Event()
        self._copied.record()
        return values

    def write_index(self, kv: int, pool_slots: int) -> torch.Tensor:
        """As `StepLayout.write_index`: the pool rows of the step's K/V for `kv` heads. A buffer
        per head count, made on first use (a warm-up, before any capture) and rewritten in place
        by every `load()`, so a captured graph reads the current step's rows."""
        out = self.write_rows.get(kv)
        if out is None:
            # normal tensors, though the forward runs in inference mode: load() writes them
            with torch.inference_mode(False):
                heads = torch.arange(kv, device=self.device)
                self._head_base[kv] = heads[None, :] * pool_slots
                out = self.write_rows[kv] = torch.empty(
                    self.rows * kv, dtype=torch.long, device=self.device
                )
                torch.add(self._head_base[kv], self.slots[:, None], out=out.view(self.rows, kv))
        return out

    # --- attention --------------------------------------------------------------------------------
    def block_mask(self, window: int | None) -> BlockMask:
        """The block mask for layers with `window` (None: full attention), over the buffers:
        built once, read afresh by every step (its tables are the buffers `load()` writes)."""
        if window in self.masks:
            return self.masks[window]
        owner, spos, srow, rkey, rslot, plen, seg = (
            self.slot_owner,
            self.slot_pos,
            self.slot_row,
            self.row_key,
            self.row_slot,
            self.prefix_len,
            self.seg,
        )

        def mask_mod(b, h, q, kv):
            r = srow[q]  # the row this query slot computes
            visible = (owner[kv] == rkey[r]) & (spos[kv] <= rslot[r])
            if window is not None:
                visible = visible & (rslot[r] - spos[kv] < window)
                qpos = plen[r] + rslot[r]
            for j in range(MAX_SEGMENTS):
                inside = (kv >= seg[r, j, 0]) & (kv < seg[r, j, 1])
                if window is not None:
                    inside = inside & (qpos - (seg[r, j, 2] + kv - seg[r, j, 0]) < window)
                visible = visible | inside
            return visible

        slots = self.pool.num_blocks * self.block_size
        # No Q-major tables (compute_q_blocks=False): they serve only the backward, and would be
        # derived once here from the first step's tables, then go stale.
        mask = BlockMask.from_kv_blocks(
            self.kv_num_blocks,
            self.kv_indices,
            BLOCK_SIZE=(Q_TILE, self.block_size),
            mask_mod=mask_mod,
            seq_lengths=(self.rows * Q_TILE, slots),
            compute_q_blocks=False,
        )
        self.masks[window] = mask
        return mask


class StaticDecodeUnavailable(RuntimeError):
    """The compiled decode cannot run this step (recorded as a fallback); the engine drops it."""


_compiled = None


def flex_decode_attention(q, handle, scaling: float, window: int | None) -> torch.Tensor:
    """[1, H, rows, D] -> [1, rows, H, D]: every decode row over its keys in the pool, one call.

    The rows go to their tiles' query slots first (`StaticDecode.slot_row`, a fixed-shape
    gather) and come back from them after (`query_slot`)."""
    global _compiled
    layout = handle.layout
    keys, values = handle.k.unsqueeze(0), handle.v.unsqueeze(0)
    options = kernel_options(q.shape[-1], layout.block_size)
    mask = layout.block_mask(window)
    q = q.index_select(2, layout.slot_row)
    if q.device.type != "cuda":  # FlexAttention's eager reference (which ignores the options)
        out = flex_attention(
            q, keys, values, block_mask=mask, scale=scaling, enable_gqa=True, kernel_options=options
        )
        return out.index_select(2, layout.query_slot).transpose(1, 2)
    if _compiled is None:
        # fullgraph: a graph break would run flex eagerly, a score matrix over the whole pool
        _compiled = torch.compile(flex_attention, dynamic=False, fullgraph=True)
    # Each (bucket, window, head shape, pool size) is its own static compile. Past Dynamo's
    # recompile limit the call would silently run eagerly with a full score matrix: allow the
    # compiles the engine's keys need, and fail loudly past them (the engine then drops to the
    # eager cascade, recorded).
    from torch._dynamo.exc import FailOnRecompileLimitHit

    try:
        with torch._dynamo.config.patch(
            recompile_limit=COMPILE_LIMIT, fail_on_recompile_limit_hit=True
        ):
            out = _compiled(
                q,
                keys,
                values,
                block_mask=mask,
                scale=scaling,
                enable_gqa=True,
                kernel_options=options,
            )
    except FailOnRecompileLimitHit as error:
        fallbacks.record(
            f"static_decode flex_attention (bucket {layout.rows}, window {window})",
            "eager cascade (step_attention)",
            f"Dynamo's recompile limit ({COMPILE_LIMIT}) hit: {error}",
        )
        raise StaticDecodeUnavailable(str(error)) from error
    except fallbacks.compiler_errors() as error:  # Dynamo, Inductor, a Triton launch: named
        fallbacks.record(
            f"static_decode flex_attention (bucket {layout.rows}, window {window})",
            "eager cascade (step_attention)",
            f"the compiler could not compile or run it: {type(error).__name__}: {str(error)[:300]}",
        )
        raise StaticDecodeUnavailable(str(error)) from error
    return out.index_select(2, layout.query_slot).transpose(1, 2)
