"""The streamed schedule: every unit of a run on one engine, each request submitted as soon as its
inputs are known, with no barrier between phases (runner.py chooses it where it is exact).

The barrier schedule (runner.py) computes a unit as one engine call: every B of a chunk ends
before the chunk's arms start, and each phase waits for the longest sequence of the one before.
The stream hands the engine one queue instead (its streaming API, engine/README.md):

- chunks start in order, each with its base units (NT, the self-consistency samples, B,
  oracle_B, every seed), while fewer sequences are unfinished in the engine than `window`
  allows (`WINDOW_CHUNKS` chunks' worth of base sequences, and under a row cap at least
  `WINDOW_CHUNKS` times the cap; arms count as any sequence);
- a problem's arms are forked as soon as its own B (or oracle_B) has closed its thinking, which
  may be before B has finished: the base's reasoning is the fork's stem, copied from the base's
  cache (`ForkRequest.reuse`), bit for bit what computing it again gives;
- a problem's resolutions (`--resolve`) start once its base unit's records and its own arms are
  final; B's hidden-state pass (`--signals`) joins the queue as each B finishes;
- a unit's part is written when its last record is known and the parts it is computed from
  (`Plan.inputs_of`) are written, so a killed run leaves only parts whose inputs are stored.

The requests are the barrier schedule's, built by the same functions (units/base.py, arms.py,
consistency.py, resolve.py), and every decision here is taken from which sequences finished, never from timing.
Where a sequence's logits do not depend on the batch (fp32 on CPU, the invariant kernels on CUDA
where the needle holds: schedule.py; engine/README.md) the records
are byte for byte the barrier schedule's, and so those of any chunk size, budget, resume, shard or
replay of a unit alone. A stored unit is reused as in the barrier schedule; one whose inputs are
being computed again waits for them (`deferred`) and is then checked or computed from the store.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from nudgeability.engine import Completion, ForkRequest, SequenceRef
from nudgeability.splice.experiment.conditions import CONSISTENCY
from nudgeability.splice.run.parts import reusable
from nudgeability.splice.run.stream_jobs import ArmsJob, BaseJob, Job, ResolveJob
from nudgeability.splice.run.units import UnitContext, UnitCounts
from nudgeability.splice.rundir.plan import ARMS_PHASE, RESOLVE_PHASE, Unit
from nudgeability.splice.rundir.store import WorkStore

WINDOW_CHUNKS = 2  # chunks' worth of base sequences kept unfinished in the engine


def window(
    base_sequences_per_chunk: int, chunks: int = WINDOW_CHUNKS, max_rows: int | None = None
) -> int:
    """How many sequences may be unfinished in the engine (submitted, not yet finished: bases,
    arms, hidden-state passes and resolutions alike) before the stream stops starting chunks:
    `chunks` chunks' worth of base sequences, and under a row cap (CUDA: the rows the pool
    holds) at least `chunks` caps' worth, whatever the chunk size: it cuts the parts, not the
    batch (shape.py) (costs/estimate/schedule.py models the same)."""
    return max(chunks * base_sequences_per_chunk, chunks * (max_rows or 0))


class Stream:
    """Runs the missing units of a plan's chunks on the engine of `ctx`; `on_unit(unit, counts)`
    is told of each unit written (counts None: a stored unit reused)."""

    def __init__(
        self,
        ctx: UnitContext,
        store: WorkStore,
        on_unit: Callable[[Unit, UnitCounts | None], None],
    ):
        self.ctx, self.store, self.on_unit = ctx, store, on_unit
        self.plan = ctx.prepared.plan
        self.engine = ctx.backend.engine
        self.waiters: dict[int, Callable[[Completion], None]] = {}  # sequence id -> on finish
        self.watches: dict[int, Callable[[list[int]], bool]] = {}  # running base -> cut check
        self.open: list[Job] = []
        self.computed = self.resumed = 0
        # Forks copy their stem from the base's cache only in a pool that grows with the work:
        # under a budget (--max-batch-tokens, or on CUDA the pool sized from free memory) a base
        # held for forks queued behind other work could keep that work from ever fitting.
        # Without the copy the stem is computed again (same bits).
        self.reuse = self.engine.max_batch_tokens is None

    def run(self) -> None:
        chunks = deque(self.plan.mine)
        per_problem = sum(
            self.plan.samples if phase == CONSISTENCY else 1
            for phase in self.plan.record_phases
            if phase != ARMS_PHASE
        )
        base = self.plan.chunk_size * len(self.plan.seeds) * per_problem
        most = window(base, max_rows=self.engine.max_rows)
        while chunks or self.open:
            while chunks and len(self.waiters) < most:
                self._start_chunk(chunks.popleft())
            if not self.engine.busy:
                if self.open and not chunks:
                    names = ", ".join(job.unit.name for job in self.open)
                    raise RuntimeError(f"the stream has nothing to run but units open: {names}")
                continue
            for ref, completion in self.engine.step():
                self.waiters.pop(ref.id)(completion)
            for seq_id, found_cut in list(self.watches.items()):
                if found_cut(self.engine.peek(SequenceRef(seq_id))):
                    del self.watches[seq_id]

    # --- submitting ---------------------------------------------------------------------------
    def generate(self, prompt, params, on_finish, *, shared=0, retain=False) -> SequenceRef:
        ref = self.engine.submit_generate(prompt, params, shared=shared, retain=retain)
        self.waiters[ref.id] = on_finish
        return ref

    def fork(self, request: ForkRequest, on_finish: Callable[[list[Completion]], None]) -> None:
        """Submit a fork; `on_finish` gets its completions, in arm order, when the last ends."""
        refs = self.engine.submit_fork(request)
        outs: list[Completion | None] = [None] * len(refs)
        left = [len(refs)]

        def finished(k: int, completion: Completion) -> None:
            outs[k] = completion
            left[0] -= 1
            if not left[0]:
                on_finish(outs)

        for k, ref in enumerate(refs):
            self.waiters[ref.id] = lambda completion, k=k: finished(k, completion)

    # --- chunks -------------------------------------------------------------------------------
    def _start_chunk(self, chunk: int) -> None:
        made: dict[Unit, Job | None] = {}  # None: a stored unit reused
        kinds = {ARMS_PHASE: ArmsJob, RESOLVE_PHASE: ResolveJob}
        for unit in self.plan.units_of_chunk(chunk, self.plan.phases):
            inputs = [made[source] for source in self.plan.inputs_of(unit)]
            inputs = [job for job in inputs if job is not None]
            stored = self.store.has(unit)
            if stored and not inputs and reusable(self.plan, self.store, unit):
                made[unit] = None
                self.resumed += 1
                self.on_unit(unit, None)
                continue
            deferred = any(job.deferred for job in inputs) or (stored and bool(inputs))
            made[unit] = kinds.get(unit.phase, BaseJob)(self, unit, inputs, deferred)
        # users first: a job that finishes problems as it starts (from stored inputs) feeds them
        for job in reversed(made.values()):
            if job is not None and not job.deferred:
                job.start()
