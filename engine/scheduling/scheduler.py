"""The scheduler: which tokens each engine step computes, where their KV goes, and what waits.

Each step (`schedule`, which returns a `StepPlan`: step_plan.py) is built in four passes:

1. **running rows**: every row holding slots feeds its next tokens: one token when all that is
   left is its last sampled token (decode), else the next prefill chunk of its context. A row
   that needs a new block and finds the pool full makes room by preemption (below);
2. **new rows**: rows of groups whose prefix is complete are admitted, oldest group first, while
   rows (`max_rows`), blocks and the step's token budget allow (a stem row needs its run's
   blocks consecutive: `KVPool.take_run`; with enough free blocks but no such run it waits);
3. **prefix chunks** of groups admitted earlier whose prefix is longer than a chunk;
4. **new groups**: waiting groups are admitted, oldest first, each with its first prefix chunk in
   this step (so that no run is held before it is written), while the budget allows, the rows
   they would bring stay within `lookahead` and the pool keeps a block per running row in reserve,
   and the blocks that admitted groups' waiting rows need to start (`_owed`).

Everything here is decided from token counts and submission order, never from timing, so a rerun
schedules identically. Prefill chunks start at fixed multiples of `chunk` in each sequence (a
step may run several chunks of one prefix), so how a prefix is cut does not depend on the step
budget or on what else runs (`engine/README.md`, batch invariance). No row reserves its budget:
blocks are taken as slots are written.

**Preemption** when a running row needs a block and none is free, and what is freed when nothing
at all could be scheduled: preemption.py, a `Preemption` the scheduler holds. Both act on one
`Queues` (queues.py): the groups and rows on the pool.

`GroupShape` and `batch_cost` (group_shape.py) size work before it exists (`splice/run/prepare.py`,
`splice/run/units/resolve.py`).
"""

from __future__ import annotations

import torch

from nudgeability.engine.kv.kv_pool import KVPool
from nudgeability.engine.scheduling.preemption import Preemption
from nudgeability.engine.scheduling.queues import Queues
from nudgeability.engine.scheduling.step_plan import StepPlan
from nudgeability.engine.sequence import Group, Row

# Positions per prefill chunk: a prefix's chunks start at multiples of it, whatever the step's
# budget, so that a prefix's KV is the same under any budget of at least this many tokens.
PREFILL_CHUNK = 2048


class Scheduler:
    """Groups and rows waiting and running on one `KVPool`; see the module docstring."""

    def __init__(
        self,
        pool: KVPool,
        *,
        max_rows: int | None,
        max_step_tokens: int,
        chunk: int,
        lookahead: int | None = None,
        reserve: bool = True,
    ):
        self.pool = pool
        self.keep_reserve = reserve
        self.max_rows = max_rows
        self.max_step_tokens = max_step_tokens
        self.chunk = chunk
        self.lookahead = lookahead if lookahead is not None else max_rows
        self.queues = Queues(pool)
        self.preemption = Preemption(self.queues)
        self._admissions = 0

    # the queues are `Queues`' (queues.py); read here as the engine and its stats read them
    waiting = property(lambda self: self.queues.waiting)
    admitted = property(lambda self: self.queues.admitted)
    running = property(lambda self: self.queues.running)
    retained = property(lambda self: self.queues.retained)

    @property
    def preemptions(self) -> int:
        """Rows preempted so far (each recomputes its context)."""
        return self.preemption.count

    @property
    def busy(self) -> bool:
        """True while some group has rows that have not finished."""
        return any(g.live for g in self.waiting) or any(g.live for g in self.admitted)

    def add(self, group: Group) -> None:
        self.waiting.append(group)

    # --- the four passes ----------------------------------------------------------------------
    def schedule(self) -> StepPlan:
        plan = StepPlan()
        budget = [self.max_step_tokens]
        self._running_rows(plan, budget)
        while True:
            for _ in range(3):  # a stem copied or a group admitted can let rows start at once
                self._admit_rows(plan, budget)
                self._prefix_chunks(plan, budget)
                self._admit_groups(plan, budget)
                if plan.row_chunks or plan.prefix_chunks:
                    break
            if plan.row_chunks or plan.prefix_chunks or not self.preemption.unstick():
                break
        plan.row_chunks.sort(key=lambda c: (c[0].group.id, c[0].id))
        return plan

    def _running_rows(self, plan: StepPlan, budget: list[int]) -> None:
        # One chunk per row and step: a row's tokens must be contiguous in the forward.
        decode = [r for r in self.running if len(r.context) - r.computed == 1]
        prefill = [r for r in self.running if len(r.context) - r.computed > 1]
        for row in decode + prefill:
            if not row.holds_slots:  # preempted earlier in this pass
                continue
            n = self._next_chunk(row)
            if n > 1 and not self._fits(plan, n, budget):
                continue
            if self._give_slots(row, n, plan, budget):
                plan.row_chunks.append((row, row.computed, row.computed + n))
                budget[0] -= n

    def _admit_rows(self, plan: StepPlan, budget: list[int]) -> None:
        for group in list(self.admitted):
            if not group.ready:
                continue
            while group.waiting:
                row = group.waiting[0]
                if row.stem is None and not self._row_room():
                    return
                if row.copy_from is not None:
                    taken = self._copy_stem(row)
                    if taken is None:
                        return  # its base has not written the stem yet
                    if taken:
                        group.waiting.popleft()
                        self.queues.close_if_done(group)
                        continue
                n = self._next_chunk(row)
                need = self._blocks_to_admit(row, n)
                if need is None or not self._fits(plan, n, budget):
                    return  # first come, first served: nothing younger overtakes it
                if need + self._reserve() > self.pool.free_blocks:
                    return
                if row.stem is not None and row.stem.start is None:
                    start = self.pool.take_run(row.stem.length)
                    if start is None:  # enough free blocks, but no consecutive run of them
                        return
                    row.stem.start = start
                group.waiting.popleft()
                self._hold(row)
                self._give_slots(row, n, plan, budget)
                plan.row_chunks.append((row, row.computed, row.computed + n))
                budget[0] -= n

    def _admit_groups(self, plan: StepPlan, budget: list[int]) -> None:
        """Admit waiting groups, oldest first, each with its first prefix chunk in this step, so
        that no run is held before it is written."""
        while self.waiting:
            group = self.waiting[0]
            if self.lookahead is not None and self._unstarted() >= self.lookahead:
                return
            own = group.own
            if own is not None and own.start is None and own.length:
                first = min(own.length, self.chunk)
                if not self._fits(plan, first, budget):
                    return
                held = self._reserve() + self._owed()
                if self.pool.blocks_for(own.length) + held > self.pool.free_blocks:
                    return
                start = self.pool.take_run(own.length)
                if start is None:  # enough free blocks, but no consecutive run of them
                    return
                own.start = start
            elif own is not None and own.start is None:
                own.start = 0  # an empty run: nothing to hold
            self.waiting.pop(0)
            group.admitted = True
            self.admitted.append(group)
            self._chunks_of(group, plan, budget)

    def _prefix_chunks(self, plan: StepPlan, budget: list[int]) -> None:
        for group in self.admitted:
            if not self._chunks_of(group, plan, budget):
                return

    def _chunks_of(self, group: Group, plan: StepPlan, budget: list[int]) -> bool:
        """Schedule the group's next prefix chunks within the budget; False once it is spent."""
        run = group.own
        if run is None or run.start is None:
            return True
        c0 = max(run.written, max((c1 for g, _, c1 in plan.prefix_chunks if g is group), default=0))
        while c0 < run.length:
            c1 = min(run.length, (c0 // self.chunk + 1) * self.chunk)
            if not self._fits(plan, c1 - c0, budget):
                return False
            plan.prefix_chunks.append((group, c0, c1))
            budget[0] -= c1 - c0
            c0 = c1
        return True

    # --- rules --------------------------------------------------------------------------------
    def _next_chunk(self, row: Row) -> int:
        """Context tokens the row feeds next: up to the next multiple of `chunk`."""
        left = len(row.context) - row.computed
        return min(left, (row.computed // self.chunk + 1) * self.chunk - row.computed)

    def _fits(self, plan: StepPlan, n: int, budget: list[int]) -> bool:
        # The first prefill work of a step always runs, so that prefills progress under any budget.
        has_prefill = plan.prefix_chunks or any(s1 - s0 > 1 for _, s0, s1 in plan.row_chunks)
        return n <= budget[0] or not has_prefill

    def _row_room(self) -> bool:
        rows = sum(1 for r in self.running if r.stem is None)
        return self.max_rows is None or rows < self.max_rows

    def _reserve(self) -> int:
        """Blocks kept free when admitting: one per running row, so that rows can grow a block
        without preempting each other at once (none in a pool sized for all the work)."""
        return len(self.running) if self.keep_reserve else 0

    def _owed(self) -> int:
        """Blocks the admitted groups' waiting rows need to start: a new group's run must leave
        them free, or work admitted earlier (a fork's arms, a stem) could wait on it for ever."""
        owed = 0
        for group in self.admitted:
            for row in group.waiting:
                owed += self._blocks_to_admit(row, self._next_chunk(row)) or 0
        return owed

    def _unstarted(self) -> int:
        return sum(len(g.waiting) for g in self.admitted)

    def _blocks_to_admit(self, row: Row, n: int) -> int | None:
        """Blocks a row needs to start feeding `n` tokens; None when it cannot start yet."""
        if row.stem is not None:
            return self.pool.blocks_for(row.stem.length) if row.stem.start is None else 0
        return self.pool.blocks_for(row.computed + n) - len(row.blocks)

    def _hold(self, row: Row) -> None:
        row.admitted_at = self._admissions
        self._admissions += 1
        self.running.append(row)

    def _copy_stem(self, row: Row) -> bool | None:
        """Take a stem row's KV from its base's cache when the base still holds it: True when
        copied, False when the base's KV is gone (the row computes it), None while the base runs
        but has not written the stem yet (the row waits)."""
        base, tokens = row.copy_from
        if base.holds_slots and base.computed < tokens:
            return None
        start = None
        if base.holds_slots:
            start = self.pool.take_run(row.stem.length)
            if start is None:
                return None  # no consecutive free blocks now; the base keeps its KV meanwhile
            row.stem.start = start
            slots = [base.slot(i, self.pool.block_size) for i in range(tokens)]
            self.pool.copy_slots(torch.tensor(slots, device=self.pool.device), start)
            row.stem.written = row.stem.length
            row.computed = len(row.context)
            row.group.live -= 1
        row.copy_from = None
        base.pins -= 1
        self._free_if_unneeded(base)
        return start is not None

    # --- slots and preemption -----------------------------------------------------------------
    def _give_slots(self, row: Row, n: int, plan: StepPlan, budget: list[int]) -> bool:
        """Blocks for the row's next `n` context tokens, preempting others if the pool is full;
        False when the row itself had to be preempted."""
        while row.stem is None and self.pool.blocks_for(row.computed + n) > len(row.blocks):
            start = self.pool.take_block()
            if start is not None:
                row.blocks.append(start)
                continue
            if not self.preemption.evict(row, plan, budget):
                self.preemption.preempt(row, plan, budget)
                return False
        return True

    # --- finishing ----------------------------------------------------------------------------
    def after_step(self, plan: StepPlan) -> None:
        """Advance what the step computed: written prefix tokens and computed context tokens; a
        stem row that has written its whole stem is done."""
        for group, _, c1 in plan.prefix_chunks:
            group.own.written = max(group.own.written, c1)
        for row, _, s1 in plan.row_chunks:
            row.computed = s1
            if row.stem is not None and s1 == len(row.context):
                row.stem.written = row.stem.length
                self.running.remove(row)
                row.admitted_at = -1
                row.group.live -= 1
                self.queues.close_if_done(row.group)

    def finish(self, row: Row) -> None:
        """A sampled row hit a stop condition: free what it holds unless it is retained or a stem
        may still be copied from it."""
        self.running.remove(row)
        row.group.live -= 1
        if row.retain:
            self.retained.append(row)
        self._free_if_unneeded(row)

    def release(self, row: Row) -> None:
        """The caller no longer needs a retained row's KV."""
        row.retain = False
        if row in self.retained:
            self.retained.remove(row)
        self._free_if_unneeded(row)

    def _free_if_unneeded(self, row: Row) -> None:
        if row.finished and not row.retain and row.pins == 0 and row.holds_slots:
            self.queues.free_blocks(row)
