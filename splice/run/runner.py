"""Running a prepared experiment: its units, on one of two schedules, then the records file.

    prepared = prepare(RunConfig(model="smollm2", task="musique", n=4, device="cpu"))
    result = run(prepared, "runs/smollm2-musique-greedy")

    # as `nudge run` does it on any device (cli/run.py): the shape first (shape.py)
    engine = RunEngine(requested, device)
    shape = settle(requested, device, out, pool_rows=engine.pool_rows, schedule=engine.schedule)
    prepared = prepare(shape.config(requested), loaded=engine.loaded)
    result = run(prepared, out, engine=engine.engine, shape=shape)

The units, their keys and their order are the plan's (splice/rundir/plan.py). They are computed
on one of two schedules, which give the same records where the engine's logits do not depend on
the batch (`streams`): the **stream** (stream.py) puts every unit on one engine queue, each
request submitted as soon as its inputs are known (a problem's arms once its B has closed its
thinking); **by unit**, each unit is one engine call, phase after phase in the protocol's order
(NT, the self-consistency samples, B, oracle_B, the arms, the resolutions), and each call is the
whole batch a resume or a replay computes again (the chunk size is the run's shape, settled
before `prepare`: shape.py `settle`; on CUDA from the KV pool of the engine `RunEngine` builds
for it, which the run then computes on). Either way a unit whose part file exists is reused, so
a run killed at any moment and started again finishes only the missing work. When
every unit of this shard is stored, `records.jsonl` is assembled from the parts in canonical
order (problems, then conditions, then seeds) and written atomically; with `--resolve`,
`resolutions.jsonl` the same way, one line per TOOL record, in the records' order. Then the
manifest is sealed with the hashes of these files and of the parts (last, atomically).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from nudgeability.backends.base import EngineBackend
from nudgeability.engine import Engine
from nudgeability.models.loader import LoadedModel
from nudgeability.splice.experiment.conditions import CONSISTENCY
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.device_batching import batches_from_pool
from nudgeability.splice.run.engine_build import cuda_invariance_available, pool_rows_of, run_engine
from nudgeability.splice.run.parts import reusable, store_unit, stored_records
from nudgeability.splice.run.prepare import Prepared, load_run_model
from nudgeability.splice.run.progress import PhaseBar, RunEta
from nudgeability.splice.run.schedule import STREAM, Schedule, choose_schedule, decide
from nudgeability.splice.run.stream import Stream
from nudgeability.splice.run.units import UnitContext, UnitCounts, run_arms_unit, run_base_unit
from nudgeability.splice.run.units.consistency import run_consistency_unit
from nudgeability.splice.run.units.resolve import run_resolve_unit
from nudgeability.splice.run.validation import device_defaults, validate
from nudgeability.splice.rundir.assemble import assemble_records, assemble_resolutions
from nudgeability.splice.rundir.layout import RESOLUTIONS
from nudgeability.splice.rundir.manifest import UserInterventions
from nudgeability.splice.rundir.plan import ARMS_PHASE, RESOLVE_PHASE, Unit
from nudgeability.splice.rundir.store import WorkStore

if TYPE_CHECKING:  # shape.py imports workers.py, which runs units here
    from nudgeability.splice.run.shape import RunShape


@dataclass(frozen=True)
class RunResult:
    """Where the run's files are and what was done."""

    out: Path
    records: int  # lines in records.jsonl
    units_computed: int
    units_resumed: int  # units found already stored
    resolutions: int = 0  # lines in resolutions.jsonl (runs with --resolve)


def run(
    prepared: Prepared,
    out: str | os.PathLike,
    *,
    progress: bool = True,
    schedule: str | None = None,
    engine: Engine | None = None,
    shape: RunShape | None = None,
) -> RunResult:
    """Compute every missing unit of `prepared` into `out`, then write records.jsonl.

    `out` is created (atomically) or, when it holds the manifest of the same config, resumed;
    a different config raises `ConfigChangedError` naming the differing keys. `schedule` is
    "stream" (stream.py: one engine queue, no barrier between phases) or "units" (one engine
    call per unit, phase after phase); None picks the stream where it gives the records of the
    units schedule byte for byte (schedule.py, `choose_schedule`). The manifest's `schedule`
    says which ran and why. `engine`: the one built to settle the run's shape (`RunEngine`),
    computed on instead of a new one; `shape`: that shape (shape.py `settle`), whose schedule,
    where it decided one (CUDA), is the run's, and whose chunk size and row cap the manifest's
    `schedule` records there.
    """
    if schedule not in (None, "stream", "units"):
        raise ValueError(f"schedule must be 'stream' or 'units', got {schedule!r}")
    plan = prepared.plan
    with WorkStore.open(out, prepared.manifest) as store:
        for warning in resume_warnings(store.root, store.provenance_changes):
            print(f"nudge run: warning: {warning}", file=sys.stderr)
        settled = shape.schedule if shape is not None and schedule is None else None
        chosen = settled or choose_schedule(prepared, schedule)
        ctx = unit_context(prepared, progress=progress, engine=engine, stream=chosen.name == STREAM)
        if chosen.name == STREAM:
            computed, resumed = _streamed(ctx, store, progress)
        else:
            computed, resumed = _by_unit(ctx, store, progress)
        tally, resolved = [0], [0]
        lines = assemble_records(plan, store.read_part, store.parts)
        path = store.write_records(_counted(lines, tally))
        if plan.resolve:
            lines = assemble_resolutions(plan, store.read_part, store.parts)
            store.write_records(_counted(lines, resolved), RESOLUTIONS)
        entry = chosen.to_manifest()
        if shape is not None and shape.max_rows is not None:
            entry["shape"] = shape.to_manifest()  # this process's: a resume's may differ
        store.seal(entry)
        return RunResult(path.parent, tally[0], computed, resumed, resolved[0])


def _by_unit(ctx: UnitContext, store: WorkStore, progress: bool) -> tuple[int, int]:
    """Phase after phase, each unit one engine call; (units computed, units reused)."""
    plan = ctx.prepared.plan
    eta = RunEta(plan, ctx.prepared.config)
    computed = resumed = 0
    for phase in plan.phases:
        units = plan.units(phase)
        with PhaseBar(phase, units, plan, progress, eta) as bar:
            for unit in units:
                if store.has(unit) and reusable(plan, store, unit):
                    resumed += 1
                    bar.done(unit, None)
                    continue
                counts = compute_unit(ctx, store, unit)
                computed += 1
                bar.done(unit, counts)
    return computed, resumed


def _streamed(ctx: UnitContext, store: WorkStore, progress: bool) -> tuple[int, int]:
    """Every unit on one engine queue (stream.py), a bar per phase; (computed, reused)."""
    plan = ctx.prepared.plan
    eta = RunEta(plan, ctx.prepared.config)
    bars = {phase: PhaseBar(phase, plan.units(phase), plan, progress, eta) for phase in plan.phases}
    try:
        stream = Stream(ctx, store, lambda unit, counts: bars[unit.phase].done(unit, counts))
        stream.run()
    finally:
        for bar in bars.values():
            bar.__exit__()
    return stream.computed, stream.resumed


class RunEngine:
    """The engine of a local run whose KV pool is sized from free memory (CUDA), built once when
    settling the run's shape asks for the rows its pool holds (shape.py `settle`), before
    `prepare`: on the model it then hands `prepare` (`loaded`), capped at those rows, and the
    run computes on it (`run(..., engine=)`). Elsewhere nothing is built here (`engine` None) and
    the run builds its own (`unit_context`). `loaded`: a model already in memory."""

    def __init__(
        self,
        requested: RunConfig,
        device: str,
        loaded: LoadedModel | None = None,
        recorded: UserInterventions | None = None,
    ):
        self.requested, self.device, self.loaded = requested, device, loaded
        self.recorded = recorded  # a resume's interventions, from its manifest: no file run again
        self.engine: Engine | None = None
        self.rows = 0
        self.chosen: Schedule | None = None
        self.config: RunConfig | None = None

    def schedule(self) -> Schedule:
        """The run's schedule (schedule.py `decide`) on the loaded model, decided once, before
        the engine is built: the engine computes with the batch-invariant CUDA kernels exactly
        when the run takes the stream."""
        if self.chosen is None:
            config = self._resolved()
            if self.loaded is None:
                self.loaded = load_run_model(config, self.device)
            model, tokenizer = self.loaded.model, self.loaded.tokenizer
            self.chosen = decide(replace(config, device=self.device), model, tokenizer)
        return self.chosen

    def pool_rows(self) -> int:
        if self.engine is None:
            stream = self.schedule().name == STREAM
            config = self._resolved()
            self.engine = run_engine(
                self.loaded.model, self.loaded.tokenizer, config, invariant=stream
            )
            self.rows = pool_rows_of(self.engine, config)
        return self.rows

    def _resolved(self) -> RunConfig:
        """The requested config with the device's dtype and decode, checked once."""
        if self.config is None:
            validate(self.requested, recorded=self.recorded)  # a bad flag, before the model loads
            defaults = device_defaults(self.requested, self.device)
            self.config = replace(
                self.requested, dtype=defaults.dtype, static_decode=defaults.static_decode
            )
        return self.config


def unit_context(
    prepared: Prepared,
    *,
    progress: bool = True,
    engine: Engine | None = None,
    stream: bool = False,
) -> UnitContext:
    """What every unit of the run needs: the prepared server backend, `engine` where one was
    built for the run (`RunEngine`), or the run's engine on the prepared model
    (engine_build.py `run_engine`, with the batch-invariant CUDA kernels where the run takes the
    `stream` on CUDA; also used by `nudge verify` to replay units exactly as the run computed
    them)."""
    backend = prepared.backend
    if backend is None and engine is not None:
        backend = EngineBackend(engine)
    if backend is None:
        loaded, config = prepared.loaded, prepared.config
        invariant = stream and batches_from_pool(config.device) and cuda_invariance_available()
        backend = EngineBackend(
            run_engine(loaded.model, loaded.tokenizer, config, invariant=invariant)
        )
    backend.progress = progress  # an inner bar per backend call
    return UnitContext(prepared, backend)


def compute_unit(ctx: UnitContext, store: WorkStore, unit: Unit) -> UnitCounts:
    """Compute one unit into `store` (an arms or resolve unit reads the parts it builds on,
    `Plan.inputs_of`, from `store`)."""
    plan = ctx.prepared.plan
    indices = list(plan.chunks[unit.chunk])
    start = time.perf_counter()
    retries_before = ctx.backend.retries
    inputs = {source.phase: stored_records(store, source) for source in plan.inputs_of(unit)}
    hidden = None
    if unit.phase == RESOLVE_PHASE:
        records, counts = run_resolve_unit(ctx, unit.seed, indices, inputs)
    elif unit.phase == ARMS_PHASE:
        records, counts = run_arms_unit(ctx, unit.seed, indices, inputs)
    elif unit.phase == CONSISTENCY:
        records, counts = run_consistency_unit(ctx, unit.phase, unit.seed, indices)
    else:
        signals_of = unit.name if ctx.prepared.config.signals else None
        records, counts, hidden = run_base_unit(ctx, unit.phase, unit.seed, indices, signals_of)
    counts.seconds = time.perf_counter() - start
    counts.retries = ctx.backend.retries - retries_before
    store_unit(store, plan, unit, records, counts, hidden)
    return counts


def _counted(lines: Iterator[str], tally: list[int]) -> Iterator[str]:
    for line in lines:
        tally[0] += 1
        yield line


def resume_warnings(root: Path, changes: Sequence[str]) -> list[str]:
    """What a resume says of the provenance that differs from the run's start (lines
    `key: stored X, now Y`, splice/rundir/manifest_keys.py), naming what differs: other code
    (versions, git commit) may change the last bits of what is computed from now on; another
    thread count or server endpoint is reported as such."""
    code = [c for c in changes if c.startswith(("versions", "git_commit"))]
    threads = [c for c in changes if c.startswith("threads")]
    endpoint = [c for c in changes if c.startswith("endpoint")]
    warnings = []
    if code:
        warnings.append(
            f"resuming {root} with other code than it was started with ({'; '.join(code)}); "
            "records computed before may differ in the last bits from an uninterrupted run"
        )
    if threads:
        warnings.append(
            f"resuming {root} at another torch thread count ({'; '.join(threads)}); "
            "the records do not depend on it"
        )
    if endpoint:
        warnings.append(f"resuming {root} against another server ({'; '.join(endpoint)})")
    return warnings
