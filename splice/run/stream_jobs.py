"""The units in flight in the stream (stream.py): what each waits for, what it submits, and when
its part may be written.

A job is one unit. A base job (NT, the self-consistency samples, B, oracle_B) submits one
sequence per prompt; B and oracle_B are watched for their cut (`CutWatch`) and held for the
forks of their users. An arms job forks each (problem, base) at the base's cut; a resolution job
forks each (problem, base) once the base unit's records and the problem's arms are final.

A job fed by a live job subscribes to what it needs of it when it is made (`subscribe`): an arms
job to its bases' cuts and records (`on_cut`, `on_record`), a resolution job to its bases'
records once all are known (`on_records`) and to the arms' records per (problem, base)
(`on_group`); it gets them as typed `Record`s as they appear. A deferred one (a stored unit whose
inputs are computed again, or a unit built on such a one) subscribes to nothing and reads its
inputs from the store once they are written (parts.py `stored_records`, as the units schedule
does). A job's part, and a B unit's side file of hidden states, are written by `store_unit`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from nudgeability.engine import Completion, SequenceRef
from nudgeability.splice.experiment.conditions import CONSISTENCY, TOOL_BASE
from nudgeability.splice.experiment.interventions import ARM_BASES
from nudgeability.splice.run.parts import reusable, store_unit, stored_records
from nudgeability.splice.run.units import (
    CutWatch,
    UnitCounts,
    arm_records,
    arm_requests,
    base_inputs,
    base_record,
    in_arm_order,
)
from nudgeability.splice.run.units.consistency import consistency_inputs, consistency_record
from nudgeability.splice.run.units.resolve import (
    in_canonical_order,
    resolutions_of,
    resolve_requests,
    thinking_opens_after_result,
)
from nudgeability.splice.run.units.signals import HIDDEN_PASS, attach_signals
from nudgeability.splice.rundir.plan import ARMS_PHASE, Unit
from nudgeability.splice.rundir.records import Record, RecordKey

if TYPE_CHECKING:
    from nudgeability.splice.run.stream import Stream

PENDING = object()  # an arm group submitted and not finished


class Job:
    """One unit in flight: its records as they become known, and when its part may be written.

    `inputs` are the jobs of the units it is computed from that are not stored yet; a live job
    is fed by them as their records appear (`fed`), a deferred one reads them from the store
    once they are written."""

    def __init__(self, stream: Stream, unit: Unit, inputs: list[Job], deferred: bool):
        self.stream, self.unit, self.inputs, self.deferred = stream, unit, inputs, deferred
        self.ctx = stream.ctx
        self.indices = list(stream.plan.chunks[unit.chunk])
        self.users: list[Job] = []  # the jobs computed from this one: they wait for its part
        # what live users subscribed to (module docstring): (phase, j, boundary, generated ids),
        # (phase, j, record), (phase, records), (j, base, records)
        self.on_cut: list[Callable[[str, int, int, list[int]], None]] = []
        self.on_record: list[Callable[[str, int, Record], None]] = []
        self.on_records: list[Callable[[str, list[Record]], None]] = []
        self.on_group: list[Callable[[int, str, list[Record]], None]] = []
        self.hidden = None  # a B unit's hidden states, for its side file
        self.counts = UnitCounts()
        self.complete = self.written = False
        self.started = 0.0
        for job in inputs:
            job.users.append(self)
            if not deferred:
                self.subscribe(job)
        stream.open.append(self)

    def subscribe(self, source: Job) -> None:
        """Subscribe to what this job needs of `source`, a live job it is computed from."""

    def fed_by(self, phase: str) -> Job | None:
        """The live job feeding this one the records of `phase` (None: read them from the store)."""
        if self.deferred:
            return None
        return next((job for job in self.inputs if job.unit.phase == phase), None)

    def stored(self, phase: str) -> list[Record]:
        return stored_records(self.stream.store, Unit(phase, self.unit.seed, self.unit.chunk))

    def start(self) -> None:
        self.started = time.perf_counter()
        self.begin()

    def begin(self) -> None:
        raise NotImplementedError

    def records(self) -> list:
        """The unit's records, in the order its part stores them."""
        raise NotImplementedError

    def finish(self) -> None:
        """All records are known: write the part once the inputs' parts are written."""
        self.complete = True
        self.try_write()

    def try_write(self) -> None:
        if not self.complete or self.written or not all(job.written for job in self.inputs):
            return
        self.counts.seconds = time.perf_counter() - self.started
        store = self.stream.store
        store_unit(store, self.stream.plan, self.unit, self.records(), self.counts, self.hidden)
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


class BaseJob(Job):
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
        self.shared = [ctx.shared(unit.phase, prompt) for prompt in prompts]  # units/base.py
        self.outs: list[Completion | None] = [None] * len(prompts)
        self.found: list = [None] * len(prompts)  # each prompt's record, once it finished
        self.states: dict[int, Completion] = {}
        self.hidden_left = 0
        forkers = [u for u in self.users if not u.deferred]  # they fork from these sequences
        self.retained = bool(forkers) and self.stream.reuse
        self.holders = [len(forkers)] * len(prompts)
        self.refs: list[SequenceRef] = []
        family = ctx.prepared.family
        for j, (prompt, p) in enumerate(zip(prompts, params)):
            ref = self.stream.generate(
                prompt,
                p,
                lambda out, j=j: self._finished(j, out),
                shared=self.shared[j],
                retain=self.retained,
            )
            self.refs.append(ref)
            if self.on_cut:
                self.stream.watches[ref.id] = CutWatch(
                    family, lambda cut, ids, j=j: self._cut(j, cut, ids)
                )

    def _cut(self, j: int, boundary: int, generated: list[int]) -> None:
        for told in self.on_cut:
            told(self.unit.phase, j, boundary, generated)

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
        self.found[j] = record
        for told in self.on_record:
            told(unit.phase, j, record)
        self._release_if_unused(j)
        if self.signals and record.boundary is not None:
            self.hidden_left += 1
            cut = self.prompts[j] + record.generated_ids[: record.boundary]
            self.stream.generate(
                cut, HIDDEN_PASS, lambda state, j=j: self._state(j, state), shared=self.shared[j]
            )
        self._maybe_finish()

    def _state(self, j: int, state: Completion) -> None:
        self.states[j] = state
        self.hidden_left -= 1
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if any(out is None for out in self.outs) or self.hidden_left:
            return
        if self.signals:  # their hidden states go to the unit's side file (`store_unit`)
            states = [self.states[j] for j in sorted(self.states)]
            self.found, self.hidden = attach_signals(self.found, self.outs, states, self.unit.name)
        for told in self.on_records:
            told(self.unit.phase, self.found)
        self.finish()

    def records(self) -> list[Record]:
        return self.found

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


class ArmsJob(Job):
    """The arms of one chunk: one fork per (problem, base) whose base closed its thinking."""

    def subscribe(self, source: Job) -> None:
        if source.unit.phase in self.stream.plan.arm_bases:
            source.on_cut.append(self.base_cut)
            source.on_record.append(self.base_finished)

    def begin(self) -> None:
        self.groups: dict[tuple[int, str], object] = {}  # records, PENDING, or None (no cut)
        self.cuts: dict[tuple[int, str], int] = {}
        ids = [self.ctx.prepared.problems[i].id for i in self.indices]
        for base in self.stream.plan.arm_bases:
            if self.fed_by(base) is None:
                records = {record.problem_id: record for record in self.stored(base)}
                for j, pid in enumerate(ids):
                    self.base_finished(base, j, records[pid])

    def base_cut(self, base: str, j: int, boundary: int, generated: list[int]) -> None:
        if (j, base) not in self.cuts:
            self._fork(j, base, boundary, generated)

    def base_finished(self, base: str, j: int, record: Record) -> None:
        key, boundary = (j, base), record.boundary
        if key in self.cuts:
            if self.cuts[key] != boundary:
                raise RuntimeError(f"{self.unit.name}: the cut found while {base} ran moved")
        elif boundary is None:
            self.groups[key] = None
            self._tell_resolve(j, base, [])
            self._let_go(j, base)
        else:
            self._fork(j, base, boundary, record.generated_ids)
        self._maybe_finish()

    def _fork(self, j: int, base: str, boundary: int, generated: list[int]) -> None:
        made = arm_requests(self.ctx, self.unit.seed, self.indices[j], base, boundary, generated)
        source = self.fed_by(base)
        self.cuts[(j, base)] = boundary
        self.groups[(j, base)] = PENDING
        found: list[list[Record] | None] = [None] * len(made)  # each fork's records
        for k, (request, group) in enumerate(made):
            request.reuse = source.ref_to_fork(j) if source is not None else None
            self.stream.fork(
                request,
                lambda outs, k=k, group=group: self._arms_done(j, base, group, outs, found, k),
            )
        self._let_go(j, base)

    def _let_go(self, j: int, base: str) -> None:
        source = self.fed_by(base)
        if source is not None:
            source.let_go(j)

    def _arms_done(
        self, j: int, base: str, group, outs: list[Completion], found: list, k: int
    ) -> None:
        found[k] = arm_records(self.ctx, self.unit.seed, group, outs, self.counts)
        if any(records is None for records in found):
            return  # a fork of this problem and base is still running
        records = in_arm_order(self.ctx, base, [r for records in found for r in records])
        self.groups[(j, base)] = records
        self._tell_resolve(j, base, records)
        self._maybe_finish()

    def _tell_resolve(self, j: int, base: str, records: list[Record]) -> None:
        for told in self.on_group:
            told(j, base, records)

    def _maybe_finish(self) -> None:
        expected = len(self.indices) * len(self.stream.plan.arm_bases)
        known = [g for g in self.groups.values() if g is not PENDING]
        if len(known) == expected and not self.complete:
            self.finish()

    def records(self) -> list[Record]:
        out = []
        for j in range(len(self.indices)):
            for base in self.stream.plan.arm_bases:
                out += self.groups[(j, base)] or []
        return out


class ResolveJob(Job):
    """The resolutions of one chunk: one fork per (problem, base) with TOOL records."""

    def subscribe(self, source: Job) -> None:
        if source.unit.phase == ARMS_PHASE:
            source.on_group.append(self.arms_known)
        elif source.unit.phase in ARM_BASES:
            source.on_records.append(self.base_records_known)

    def begin(self) -> None:
        plan = self.stream.plan
        self.bases = [base for base in ARM_BASES if base in plan.record_phases]
        self.base_records: dict[str, dict[str, Record] | None] = {b: None for b in self.bases}
        self.arm_records: dict[RecordKey, Record] = {}
        self.arms_ready: set[tuple[int, str]] = set()
        self.waiting = {(j, base) for j in range(len(self.indices)) for base in self.bases}
        self.forks_left = 0
        self.done: dict = {}
        self.thinking_open = thinking_opens_after_result(self.ctx)
        live_arms = ARMS_PHASE in plan.record_phases and self.fed_by(ARMS_PHASE) is not None
        if ARMS_PHASE in plan.record_phases and not live_arms:
            for record in self.stored(ARMS_PHASE):
                self.arm_records[RecordKey.of(record)] = record
        for base in self.bases:
            if not live_arms or base not in plan.arm_bases:
                self.arms_ready.update((j, base) for j in range(len(self.indices)))
            if self.fed_by(base) is None:
                self.base_records_known(base, self.stored(base))
        self._maybe_finish()

    def base_records_known(self, base: str, records: list[Record]) -> None:
        self.base_records[base] = {record.problem_id: record for record in records}
        self._resolve_ready()

    def arms_known(self, j: int, base: str, records: list[Record]) -> None:
        for record in records:
            self.arm_records[RecordKey.of(record)] = record
        self.arms_ready.add((j, base))
        self._resolve_ready()

    def _resolve_ready(self) -> None:
        for j, base in sorted(self.waiting):
            if self.base_records[base] is None or (j, base) not in self.arms_ready:
                continue
            self.waiting.discard((j, base))
            index = self.indices[j]
            record = self.base_records[base].get(self.ctx.prepared.problems[index].id)
            source = self.fed_by(base)
            requests = resolve_requests(
                self.ctx, self.unit.seed, index, record, self.arm_records, self.done
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

    def records(self) -> list:
        return in_canonical_order(self.ctx, self.indices, dict(self.done))
