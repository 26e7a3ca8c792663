"""The streamed schedule: every unit of a run on one engine, each request submitted as soon as its
inputs are known, with no barrier between phases (runner.py chooses it where it is exact).

The barrier schedule (runner.py) computes a unit as one engine call: every B of a chunk ends
before the chunk's arms start, and each phase waits for the longest sequence of the one before.
The stream hands the engine one queue instead (its streaming API, engine/README.md):

- chunks start in order, each with its base units (NT, the self-consistency samples, B,
  oracle_B, every seed), while fewer than `WINDOW_CHUNKS` chunks' worth of base sequences are
  unfinished;
- a problem's arms are forked as soon as its own B (or oracle_B) has closed its thinking, which
  may be before B has finished: the base's reasoning is the fork's stem, copied from the base's
  cache (`ForkRequest.reuse`), bit for bit what computing it again gives;
- a problem's resolutions (`--resolve`) start once its base unit's records and its own arms are
  final; B's hidden-state pass (`--signals`) joins the queue as each B finishes;
- a unit's part is written when its last record is known and the parts it is computed from
  (`Plan.inputs_of`) are written, so a killed run leaves only parts whose inputs are stored.

The requests are the barrier schedule's, built by the same functions (units.py, consistency.py,
resolve.py), and every decision here is taken from which sequences finished, never from timing.
Where a sequence's logits do not depend on the batch (fp32 on CPU, engine/README.md) the records
are byte for byte the barrier schedule's, and so those of any chunk size, budget, resume, shard or
replay of a unit alone. A stored unit is reused as in the barrier schedule; one whose inputs are
being computed again waits for them (`deferred`) and is then checked or computed from the store.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable

from nudgeability.engine import Completion, ForkRequest, SequenceRef
from nudgeability.splice.experiment.conditions import ARM_BASES, CONSISTENCY, TOOL_BASE
from nudgeability.splice.run.consistency import consistency_inputs, consistency_record
from nudgeability.splice.run.parts import reusable, store_unit
from nudgeability.splice.run.resolve import (
    in_canonical_order,
    resolutions_of,
    resolve_requests,
    thinking_opens_after_result,
)
from nudgeability.splice.run.signals import HIDDEN_PASS, attach_signals
from nudgeability.splice.run.units import (
    UnitContext,
    UnitCounts,
    arm_records,
    arm_request,
    base_inputs,
    base_record,
)
from nudgeability.splice.rundir.layout import RecordKey, side_file
from nudgeability.splice.rundir.plan import ARMS_PHASE, RESOLVE_PHASE, Unit
from nudgeability.splice.rundir.store import WorkStore

WINDOW_CHUNKS = 2  # chunks' worth of base sequences kept unfinished in the engine
PENDING = object()  # an arm group submitted and not finished


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
        self.open: list[_Job] = []
        self.computed = self.resumed = 0
        # Forks copy their stem from the base's cache only in a pool that grows with the work:
        # under --max-batch-tokens a base held for forks queued behind other work could keep
        # that work from ever fitting. Without the copy the stem is computed again (same bits).
        self.reuse = ctx.prepared.config.max_batch_tokens is None

    def run(self) -> None:
        chunks = deque(self.plan.mine)
        per_problem = sum(
            self.plan.samples if phase == CONSISTENCY else 1
            for phase in self.plan.record_phases
            if phase != ARMS_PHASE
        )
        window = WINDOW_CHUNKS * self.plan.chunk_size * len(self.plan.seeds) * per_problem
        while chunks or self.open:
            while chunks and len(self.waiters) < window:
                self._start_chunk(chunks.popleft())
            if not self.engine.busy:
                if chunks:
                    continue
                names = ", ".join(job.unit.name for job in self.open)
                raise RuntimeError(f"the stream has nothing to run but units open: {names}")
            for ref, completion in self.engine.step():
                self.waiters.pop(ref.id)(completion)
            for seq_id, found_cut in list(self.watches.items()):
                if found_cut(self.engine.peek(SequenceRef(seq_id))):
                    del self.watches[seq_id]

    # --- submitting ---------------------------------------------------------------------------
    def generate(self, prompt, params, on_finish, *, retain=False) -> SequenceRef:
        ref = self.engine.submit_generate(prompt, params, retain=retain)
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
        made: dict[Unit, _Job | None] = {}  # None: a stored unit reused
        kinds = {ARMS_PHASE: _ArmsJob, RESOLVE_PHASE: _ResolveJob}
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
            made[unit] = kinds.get(unit.phase, _BaseJob)(self, unit, inputs, deferred)
        # users first: a job that finishes problems as it starts (from stored inputs) feeds them
        for job in reversed(made.values()):
            if job is not None and not job.deferred:
                job.start()


class _Job:
    """One unit in flight: its records as they become known, and when its part may be written.

    `inputs` are the jobs of the units it is computed from that are not stored yet; a live job
    is fed by them as their records appear (`fed`), a deferred one reads them from the store
    once they are written."""

    def __init__(self, stream: Stream, unit: Unit, inputs: list[_Job], deferred: bool):
        self.stream, self.unit, self.inputs, self.deferred = stream, unit, inputs, deferred
        self.ctx = stream.ctx
        self.indices = list(stream.plan.chunks[unit.chunk])
        self.users: list[_Job] = []
        self.counts = UnitCounts()
        self.complete = self.written = False
        self.started = 0.0
        for job in inputs:
            job.users.append(self)
        stream.open.append(self)

    def fed_by(self, phase: str) -> _Job | None:
        """The live job feeding this one the records of `phase` (None: read them from the store)."""
        if self.deferred:
            return None
        return next((job for job in self.inputs if job.unit.phase == phase), None)

    def stored_lines(self, phase: str) -> list[str]:
        return self.stream.store.read_part(Unit(phase, self.unit.seed, self.unit.chunk))

    def start(self) -> None:
        self.started = time.perf_counter()
        self.begin()

    def begin(self) -> None:
        raise NotImplementedError

    def lines(self) -> list[str]:
        raise NotImplementedError

    def finish(self) -> None:
        """All records are known: write the part once the inputs' parts are written."""
        self.complete = True
        self.try_write()

    def try_write(self) -> None:
        if not self.complete or self.written or not all(job.written for job in self.inputs):
            return
        self.counts.seconds = time.perf_counter() - self.started
        store_unit(self.stream.store, self.stream.plan, self.unit, self.lines(), self.counts)
        self.stream.computed += 1
        self._close(self.counts)

    def _close(self, counts: UnitCounts | None) -> None:
        self.written = True
        self.stream.open.remove(self)
        self.stream.on_unit(self.unit, counts)
        for user in self.users:
            user.input_written()

    def input_written(self) -> None:
        if not all(job.written for job in self.inputs):
            return
        if self.deferred:
            stream = self.stream
            if stream.store.has(self.unit) and reusable(stream.plan, stream.store, self.unit):
                stream.resumed += 1
                self._close(None)
            else:
                self.start()  # from the stored parts: `fed_by` names no job once deferred
        else:
            self.try_write()


class _BaseJob(_Job):
    """NT, the self-consistency samples, B or oracle_B of one chunk: one sequence per prompt."""

    def begin(self) -> None:
        ctx, unit = self.ctx, self.unit
        if unit.phase == CONSISTENCY:
            prompts, params, self.owners = consistency_inputs(
                ctx, unit.phase, unit.seed, self.indices
            )
            self.signals = False
        else:
            self.signals = ctx.prepared.config.signals and unit.phase == TOOL_BASE
            prompts, params = base_inputs(ctx, unit.phase, unit.seed, self.indices, self.signals)
        self.prompts = prompts
        self.outs: list[Completion | None] = [None] * len(prompts)
        self.records: list = [None] * len(prompts)
        self.states: dict[int, Completion] = {}
        self.hidden_left = 0
        forkers = [u for u in self.users if not u.deferred]  # they fork from these sequences
        self.retained = bool(forkers) and self.stream.reuse
        self.holders = [len(forkers)] * len(prompts)
        self.refs: list[SequenceRef] = []
        family = ctx.prepared.family
        for j, (prompt, p) in enumerate(zip(prompts, params)):
            ref = self.stream.generate(
                prompt, p, lambda out, j=j: self._finished(j, out), retain=self.retained
            )
            self.refs.append(ref)
            if any(isinstance(u, _ArmsJob) for u in forkers):
                self.stream.watches[ref.id] = _CutWatch(
                    family, lambda cut, ids, j=j: self._cut(j, cut, ids)
                )

    def _cut(self, j: int, boundary: int, generated: list[int]) -> None:
        for user in self.users:
            if isinstance(user, _ArmsJob) and not user.deferred:
                user.base_cut(self.unit.phase, j, boundary, generated)

    def _finished(self, j: int, out: Completion) -> None:
        ctx, unit = self.ctx, self.unit
        self.stream.watches.pop(self.refs[j].id, None)
        self.counts.add(out, shared=False)
        self.outs[j] = out
        if unit.phase == CONSISTENCY:
            record = consistency_record(
                ctx, unit.phase, unit.seed, self.owners[j], self.prompts[j], out
            )
        else:
            problem = ctx.prepared.problems[self.indices[j]]
            record = base_record(ctx, problem, unit.phase, unit.seed, self.prompts[j], out)
        self.records[j] = record
        for user in self.users:
            if isinstance(user, _ArmsJob) and not user.deferred:
                user.base_finished(unit.phase, j, record.boundary, record.generated_ids)
        self._release_if_unused(j)
        if self.signals and record.boundary is not None:
            self.hidden_left += 1
            cut = self.prompts[j] + record.generated_ids[: record.boundary]
            self.stream.generate(cut, HIDDEN_PASS, lambda state, j=j: self._state(j, state))
        self._maybe_finish()

    def _state(self, j: int, state: Completion) -> None:
        self.states[j] = state
        self.hidden_left -= 1
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if any(out is None for out in self.outs) or self.hidden_left:
            return
        if self.signals:  # the side file is written before the part (runner.py, compute_unit)
            states = [self.states[j] for j in sorted(self.states)]
            path = self.stream.store.root / side_file(self.unit.name)
            self.records = attach_signals(self.records, self.outs, states, path, self.unit.name)
        lines = [record.to_json() for record in self.records]
        self._lines = lines
        for user in self.users:
            if isinstance(user, _ResolveJob) and not user.deferred:
                user.base_lines_known(self.unit.phase, lines)
        self.finish()

    def lines(self) -> list[str]:
        return self._lines

    def ref_to_fork(self, j: int) -> SequenceRef | None:
        """The sequence a fork of problem j may copy its stem from (still held by the engine)."""
        return self.refs[j] if self.retained and self.holders[j] > 0 else None

    def let_go(self, j: int) -> None:
        """A user has submitted its forks of problem j: the engine may free it once it is done."""
        self.holders[j] -= 1
        self._release_if_unused(j)

    def _release_if_unused(self, j: int) -> None:
        if self.retained and self.holders[j] == 0 and self.outs[j] is not None:
            self.holders[j] = -1  # released once
            self.stream.engine.release(self.refs[j])


class _CutWatch:
    """Finds a running base's think-close from the tokens so far (`Family.find_boundary`); the
    first close in a prefix of the tokens is the first close of them all, so the cut is final."""

    def __init__(self, family, on_cut: Callable[[int, list[int]], None]):
        self.family, self.on_cut = family, on_cut
        self.tail = len(family.think_close_text) + 4  # tokens a close can span, with margin
        self.seen = 0

    def __call__(self, tokens: list[int]) -> bool:
        if len(tokens) == self.seen:
            return False
        recent = tokens[max(0, self.seen - self.tail) :]
        self.seen = len(tokens)
        if self.family.find_marker(recent, self.family.think_close_text) is None:
            return False
        self.on_cut(self.family.find_boundary(tokens), tokens)
        return True


class _ArmsJob(_Job):
    """The arms of one chunk: one fork per (problem, base) whose base closed its thinking."""

    def begin(self) -> None:
        self.groups: dict[tuple[int, str], object] = {}  # records, PENDING, or None (no cut)
        self.cuts: dict[tuple[int, str], int] = {}
        ids = [self.ctx.prepared.problems[i].id for i in self.indices]
        for base in self.stream.plan.arm_bases:
            if self.fed_by(base) is None:
                records = {r["problem_id"]: r for r in map(json.loads, self.stored_lines(base))}
                for j, pid in enumerate(ids):
                    self.base_finished(
                        base, j, records[pid]["boundary"], records[pid]["generated_ids"]
                    )

    def base_cut(self, base: str, j: int, boundary: int, generated: list[int]) -> None:
        if (j, base) not in self.cuts:
            self._fork(j, base, boundary, generated)

    def base_finished(self, base: str, j: int, boundary: int | None, generated: list[int]) -> None:
        key = (j, base)
        if key in self.cuts:
            if self.cuts[key] != boundary:
                raise RuntimeError(f"{self.unit.name}: the cut found while {base} ran moved")
        elif boundary is None:
            self.groups[key] = None
            self._tell_resolve(j, base, [])
            self._let_go(j, base)
        else:
            self._fork(j, base, boundary, generated)
        self._maybe_finish()

    def _fork(self, j: int, base: str, boundary: int, generated: list[int]) -> None:
        request, group = arm_request(
            self.ctx, self.unit.seed, self.indices[j], base, boundary, generated
        )
        source = self.fed_by(base)
        request.reuse = source.ref_to_fork(j) if source is not None else None
        self.cuts[(j, base)] = boundary
        self.groups[(j, base)] = PENDING
        self.stream.fork(request, lambda outs: self._arms_done(j, base, group, outs))
        self._let_go(j, base)

    def _let_go(self, j: int, base: str) -> None:
        source = self.fed_by(base)
        if source is not None:
            source.let_go(j)

    def _arms_done(self, j: int, base: str, group, outs: list[Completion]) -> None:
        records = arm_records(self.ctx, self.unit.seed, group, outs, self.counts)
        self.groups[(j, base)] = records
        self._tell_resolve(j, base, [record.to_json() for record in records])
        self._maybe_finish()

    def _tell_resolve(self, j: int, base: str, lines: list[str]) -> None:
        for user in self.users:
            if isinstance(user, _ResolveJob) and not user.deferred:
                user.arms_known(j, base, lines)

    def _maybe_finish(self) -> None:
        expected = len(self.indices) * len(self.stream.plan.arm_bases)
        known = [g for g in self.groups.values() if g is not PENDING]
        if len(known) == expected and not self.complete:
            self.finish()

    def lines(self) -> list[str]:
        out = []
        for j in range(len(self.indices)):
            for base in self.stream.plan.arm_bases:
                out += [record.to_json() for record in self.groups[(j, base)] or []]
        return out


class _ResolveJob(_Job):
    """The resolutions of one chunk: one fork per (problem, base) with TOOL records."""

    def begin(self) -> None:
        plan = self.stream.plan
        self.bases = [base for base in ARM_BASES if base in plan.record_phases]
        self.base_lines: dict[str, dict[str, str] | None] = {}
        self.arm_lines: dict[RecordKey, str] = {}
        self.arms_ready: set[tuple[int, str]] = set()
        self.waiting = {(j, base) for j in range(len(self.indices)) for base in self.bases}
        self.forks_left = 0
        self.done: dict = {}
        self.thinking_open = thinking_opens_after_result(self.ctx)
        live_arms = ARMS_PHASE in plan.record_phases and self.fed_by(ARMS_PHASE) is not None
        if ARMS_PHASE in plan.record_phases and not live_arms:
            for line in self.stored_lines(ARMS_PHASE):
                self.arm_lines[RecordKey.of(json.loads(line))] = line
        for base in self.bases:
            if not live_arms or base not in plan.arm_bases:
                self.arms_ready.update((j, base) for j in range(len(self.indices)))
            self.base_lines[base] = None
            if self.fed_by(base) is None:
                self.base_lines_known(base, self.stored_lines(base))
        self._maybe_finish()

    def base_lines_known(self, base: str, lines: list[str]) -> None:
        self.base_lines[base] = {json.loads(line)["problem_id"]: line for line in lines}
        self._resolve_ready()

    def arms_known(self, j: int, base: str, lines: list[str]) -> None:
        for line in lines:
            self.arm_lines[RecordKey.of(json.loads(line))] = line
        self.arms_ready.add((j, base))
        self._resolve_ready()

    def _resolve_ready(self) -> None:
        for j, base in sorted(self.waiting):
            if self.base_lines[base] is None or (j, base) not in self.arms_ready:
                continue
            self.waiting.discard((j, base))
            index = self.indices[j]
            line = self.base_lines[base].get(self.ctx.prepared.problems[index].id)
            source = self.fed_by(base)
            requests = resolve_requests(
                self.ctx, self.unit.seed, index, line, self.arm_lines, self.done
            )
            for request, group in requests:
                request.reuse = source.ref_to_fork(j) if source is not None else None
                self.forks_left += 1
                self.stream.fork(request, lambda outs, group=group: self._resolved(group, outs))
            if source is not None:
                source.let_go(j)
        self._maybe_finish()

    def _resolved(self, group, outs: list[Completion]) -> None:
        resolutions_of(self.ctx, group, outs, self.counts, self.thinking_open, self.done)
        self.forks_left -= 1
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if not self.waiting and not self.forks_left and not self.complete:
            self.finish()

    def lines(self) -> list[str]:
        ordered = in_canonical_order(self.ctx, self.indices, dict(self.done))
        return [record.to_json() for record in ordered]
