"""Running a prepared experiment: the phases, unit by unit, then the records file.

    prepared = prepare(RunConfig(model="smollm2", task="musique", n=4))
    result = run(prepared, "runs/smollm2-musique-greedy")

Order of work (splice/README.md): NT for all problems, then B, then oracle_B, then the arms. Each
phase walks its units (seed, chunk) in order; a unit whose part file exists is skipped, so a run
killed at any moment and started again finishes only the missing work. When every unit of this
shard is stored, `records.jsonl` is assembled from the parts in canonical order (problems, then
conditions, then seeds) and written atomically. The same config gives the same bytes. With
`--resolve` a last phase resolves every TOOL record (resolve.py) and `resolutions.jsonl` is
assembled the same way, one line per TOOL record, in the records' order. Then the manifest is
sealed with the hashes of these files and of the parts (last, atomically).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from nudgeability.backends.base import EngineBackend
from nudgeability.engine import Engine
from nudgeability.engine.progress import progress_bar
from nudgeability.splice.experiment.conditions import CONSISTENCY
from nudgeability.splice.run.consistency import run_consistency_unit
from nudgeability.splice.run.prepare import Prepared
from nudgeability.splice.run.resolve import run_resolve_unit
from nudgeability.splice.run.units import UnitContext, UnitCounts, run_arms_unit, run_base_unit
from nudgeability.splice.rundir.assemble import assemble_records, assemble_resolutions, tool_keys
from nudgeability.splice.rundir.layout import RESOLUTIONS, side_file
from nudgeability.splice.rundir.part_check import base_records
from nudgeability.splice.rundir.plan import ARMS_PHASE, RESOLVE_PHASE, Plan, Unit
from nudgeability.splice.rundir.store import WorkStore


@dataclass(frozen=True)
class RunResult:
    """Where the run's files are and what was done."""

    out: Path
    records: int  # lines in records.jsonl
    units_computed: int
    units_resumed: int  # units found already stored
    resolutions: int = 0  # lines in resolutions.jsonl (runs with --resolve)


def run(prepared: Prepared, out: str | os.PathLike, *, progress: bool = True) -> RunResult:
    """Compute every missing unit of `prepared` into `out`, then write records.jsonl.

    `out` is created (atomically) or, when it holds the manifest of the same config, resumed;
    a different config raises `ConfigChangedError` naming the differing keys.
    """
    plan = prepared.plan
    with WorkStore.open(out, prepared.manifest) as store:
        if store.provenance_changes:
            print(
                f"nudge run: warning: resuming {store.root} with other code than it was started with "
                f"({'; '.join(store.provenance_changes)}); records computed before may differ in the "
                "last bits from an uninterrupted run",
                file=sys.stderr,
            )
        ctx = unit_context(prepared, progress=progress)
        computed = resumed = 0
        for phase in plan.phases:
            units = plan.units(phase)
            with _PhaseBar(phase, units, plan, progress) as bar:
                for unit in units:
                    if store.has(unit) and _sound(plan, store, unit):
                        resumed += 1
                        bar.done(unit, None)
                        continue
                    counts = compute_unit(ctx, store, unit)
                    computed += 1
                    bar.done(unit, counts)
        tally, resolved = [0], [0]
        lines = assemble_records(plan, store.read_part, store.parts)
        path = store.write_records(_counted(lines, tally))
        if plan.resolve:
            lines = assemble_resolutions(plan, store.read_part, store.parts)
            store.write_records(_counted(lines, resolved), RESOLUTIONS)
        store.seal()
        return RunResult(path.parent, tally[0], computed, resumed, resolved[0])


def _sound(plan: Plan, store: WorkStore, unit: Unit) -> bool:
    """Whether a stored part can be reused; a damaged one is set aside, named in one line."""
    if unit.phase == RESOLVE_PHASE:  # one resolution per TOOL record of the chunk's parts
        expected = tool_keys(plan, store.read_part, unit.seed, unit.chunk)
    else:  # an arms unit's bases were checked (or recomputed) in earlier phases
        expected = plan.expected_keys(unit, base_records(plan, unit, store.part_path))
    problem = store.part_problem(unit, expected)
    if problem is None:
        return True
    moved = store.set_aside(unit)
    print(
        f"nudge run: warning: {store.part_path(unit)}: damaged part ({problem}); moved to "
        f"{moved}, recomputing its unit",
        file=sys.stderr,
    )
    return False


def unit_context(prepared: Prepared, *, progress: bool = True) -> UnitContext:
    """What every unit of the run needs: the prepared server backend, or an engine on the prepared
    model (also used by `nudge verify` to replay units exactly as the run computed them)."""
    backend = prepared.backend
    if backend is None:
        backend = EngineBackend(
            Engine(
                prepared.loaded.model,
                prepared.loaded.tokenizer,
                max_batch_tokens=prepared.config.max_batch_tokens,
            )
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
    inputs = {source.phase: store.read_part(source) for source in plan.inputs_of(unit)}
    if unit.phase == RESOLVE_PHASE:
        records, counts = run_resolve_unit(ctx, unit.seed, indices, inputs)
    elif unit.phase == ARMS_PHASE:
        records, counts = run_arms_unit(ctx, unit.seed, indices, inputs)
    elif unit.phase == CONSISTENCY:
        records, counts = run_consistency_unit(ctx, unit.phase, unit.seed, indices)
    else:
        # the hidden states' side file is written before the part: a stored part has its states
        signals = (store.root / side_file(unit.name), unit.name)
        wanted = signals if ctx.prepared.config.signals else None
        records, counts = run_base_unit(ctx, unit.phase, unit.seed, indices, wanted)
    seconds = time.perf_counter() - start
    counts.retries = ctx.backend.retries - retries_before
    lines = [record.to_json() for record in records]
    for dependent, moved in store.write_part(unit, lines, plan.dependents_of(unit)):
        print(
            f"nudge run: warning: {store.part_path(dependent)}: built on {unit.name}, whose "
            f"records came out other than before; moved to {moved}, recomputing its unit",
            file=sys.stderr,
        )
    store.append_timing(
        {
            "unit": unit.name,
            "phase": unit.phase,
            "seed": unit.seed,
            "chunk": unit.chunk,
            "problems": len(indices),
            "sequences": counts.sequences,
            "prefill_tokens": counts.prefill_tokens,
            "shared_prefill_tokens": counts.shared_prefill_tokens,
            "generated_tokens": counts.generated_tokens,
            "cached_prompt_tokens": counts.cached_prompt_tokens,
            "retries": counts.retries,
            "seconds": round(seconds, 4),
            "generated_tokens_per_s": round(counts.generated_tokens / max(seconds, 1e-9), 2),
            "threads": torch.get_num_threads(),
        }
    )
    counts.seconds = seconds
    return counts


def _counted(lines: Iterator[str], tally: list[int]) -> Iterator[str]:
    for line in lines:
        tally[0] += 1
        yield line


class _PhaseBar:
    """A progress bar per phase (tqdm on a terminal, plain lines in a log: engine/progress.py):
    problems done (over all seeds), arms decoded, prompt and generated tokens per second of
    compute (resumed units count as done, with no tokens)."""

    def __init__(self, phase: str, units: list[Unit], plan: Plan, enabled: bool):
        self.chunks = plan.chunks
        self.arms = phase == ARMS_PHASE
        total = sum(len(self.chunks[unit.chunk]) for unit in units)
        self.bar = progress_bar(
            total, f"{phase:>8}", "problem", enabled=enabled, dynamic_ncols=True
        )
        self.sequences = self.tokens = self.prefill = 0
        self.seconds = 0.0

    def done(self, unit: Unit, counts: UnitCounts | None) -> None:
        if counts is not None:
            self.sequences += counts.sequences
            self.tokens += counts.generated_tokens
            self.prefill += counts.prefill_tokens + counts.shared_prefill_tokens
            self.seconds += counts.seconds
        seconds = max(self.seconds, 1e-9)
        postfix = {
            "prefill tok/s": f"{self.prefill / seconds:.0f}",
            "decode tok/s": f"{self.tokens / seconds:.1f}",
        }
        if self.arms:
            postfix = {"arms": self.sequences, **postfix}
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(len(self.chunks[unit.chunk]))

    def __enter__(self) -> _PhaseBar:
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()
