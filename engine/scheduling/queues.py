"""The work the scheduler holds on one KV pool, and giving back what a row or a group holds.

`Queues` is the state both halves of the scheduling act on: `Scheduler` (scheduler.py) plans each
step from it and finishes rows, `Preemption` (preemption.py) frees KV from it when the pool runs
short. Neither keeps a list of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nudgeability.engine.kv.kv_pool import KVPool
from nudgeability.engine.sequence import Group, Row, sources


@dataclass(eq=False)
class Queues:
    """Groups and rows on `pool`, each list in the order the scheduling reads it."""

    pool: KVPool
    waiting: list[Group] = field(default_factory=list)  # not admitted, in submission order
    admitted: list[Group] = field(default_factory=list)  # admitted, in submission order
    running: list[Row] = field(default_factory=list)  # rows feeding tokens, in admission order
    retained: list[Row] = field(default_factory=list)  # finished rows keeping KV, oldest first

    def free_blocks(self, row: Row) -> None:
        """Give the row's blocks back; its group closes if nothing else keeps it open."""
        self.pool.give_blocks(row.blocks)
        row.blocks = []
        row.admitted_at = -1
        self.close_if_done(row.group)

    def close_if_done(self, group: Group) -> None:
        """A group with no live row and no row holding slots lets go of its segments."""
        if group.live or group.waiting or not group.admitted:
            return
        if any(r.holds_slots for r in group.rows):
            return
        group.admitted = False
        self.admitted.remove(group)
        for run in sources(group.segments):  # a view's trunk: freed when no group reads it
            run.holders -= 1
            if run.holders == 0 and run.start is not None:
                self.pool.give_run(run.start, run.length)
                run.start = None
