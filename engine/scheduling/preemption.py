"""What the scheduler frees when KV runs short: the preemption order of scheduler.py's docstring.

A running row that needs a block and finds none free makes room (`evict`): first the KV a
finished sequence retains, then the run of an admitted group with no row started (it prefills
again), then the most recently admitted running row (`preempt`: its blocks are freed and it
waits at the front of its group, keeping its tokens, to recompute its context). When nothing at
all could be scheduled, KV kept only in case it is read is freed (`unstick`): a retained row, a
finished base a waiting stem row meant to copy, then a prompt's run no started row reads. What
needs it later computes it again, with the same bits (engine/README.md, batch invariance).
"""

from __future__ import annotations

from nudgeability.engine.scheduling.queues import Queues
from nudgeability.engine.scheduling.step_plan import StepPlan
from nudgeability.engine.sequence import Group, Row, sources


class Preemption:
    """Frees KV from the scheduler's `queues` (module docstring); `count` is the rows preempted so
    far. A row preempted while a step is planned leaves that step's `plan`, its tokens given back
    to the step's `budget` (`[tokens left]`)."""

    def __init__(self, queues: Queues):
        self.queues = queues
        self.pool = queues.pool
        self.count = 0

    def unstick(self) -> bool:
        """Nothing could start while finished rows keep KV that only might be read: free the
        oldest retained row, else a finished base that a waiting stem row meant to copy from (the
        stem is computed instead, with the same bits); False when there is none."""
        if self._drop_retained():
            return True
        for group in self.queues.admitted:
            for row in group.waiting:
                base = row.copy_from[0] if row.copy_from is not None else None
                if base is not None and base.finished and base.holds_slots:
                    self.queues.free_blocks(base)
                    return True
        return self._drop_idle_run()

    def _drop_idle_run(self) -> bool:
        """Free a prompt's run that no started row reads (a shared start kept for queued forks):
        the groups reading it wait again, and the first of them prefills it again when
        admitted, with the same bits. The youngest readers' run goes first."""
        busy = {
            id(run)
            for group in self.queues.admitted
            if any(r.holds_slots for r in group.rows)
            for run in sources(group.segments)
        }
        for group in reversed(self.queues.admitted + self.queues.waiting):
            run = group.segments[0] if group.segments else None
            if run is None or run.start is None or run.offset or id(run) in busy:
                continue
            if run.source is not run:  # a trunk's view: its own row wrote it, no reader prefills
                continue
            self._free_run(run)
            for reader in [g for g in self.queues.admitted if g.segments[0] is run]:
                self._back_to_waiting(reader)
            self.queues.waiting.sort(key=lambda g: g.id)
            readers = [g for g in self.queues.waiting if g.segments and g.segments[0] is run]
            for reader in readers:
                reader.own = None
            readers[0].own = run  # the oldest reader still open prefills it
            return True
        return False

    def evict(self, protect: Row, plan: StepPlan, budget: list[int]) -> bool:
        """Free some KV for `protect`'s sake (module docstring, preemption); False if nothing can go."""
        if self._drop_retained():  # a stem still to be copied from it is computed instead
            return True
        for group in reversed(self.queues.admitted):
            own = group.own
            if (
                own is not None
                and own.start is not None
                and own.holders == 1
                and group is not protect.group
                and not any(r.holds_slots for r in group.rows)
            ):
                self._free_run(own)
                self._back_to_waiting(group)
                return True
        victims = [r for r in self.queues.running if r is not protect and r.stem is None]
        if not victims:
            return False
        self.preempt(max(victims, key=lambda r: r.admitted_at), plan, budget)
        return True

    def _drop_retained(self) -> bool:
        """Free the oldest retained row's KV; False when none is retained."""
        if not self.queues.retained:
            return False
        row = self.queues.retained.pop(0)
        row.retain = False
        self.queues.free_blocks(row)
        return True

    def _free_run(self, run) -> None:
        if run.source is not run:
            raise RuntimeError("a trunk's view is never given back itself: its trunk is")
        self.pool.give_run(run.start, run.length)
        run.start, run.written = None, 0

    def _back_to_waiting(self, group: Group) -> None:
        """An admitted group whose run was freed waits again, in submission order."""
        group.admitted = False
        self.queues.admitted.remove(group)
        self.queues.waiting.append(group)
        self.queues.waiting.sort(key=lambda g: g.id)

    def preempt(self, row: Row, plan: StepPlan, budget: list[int]) -> None:
        """Free the row's blocks; it waits at the front of its group to recompute its context."""
        for chunk in plan.row_chunks:  # planned earlier in this step: it no longer runs
            if chunk[0] is row:
                plan.row_chunks.remove(chunk)
                budget[0] += chunk[2] - chunk[1]
                break
        self.pool.give_blocks(row.blocks)
        row.blocks = []
        row.recomputed += row.computed
        row.computed = 0
        row.admitted_at = -1
        self.queues.running.remove(row)
        row.group.waiting.appendleft(row)
        self.count += 1
