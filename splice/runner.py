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

import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from nudgeability.backends.base import EngineBackend
from nudgeability.engine import Engine
from nudgeability.models.families import TOOL
from nudgeability.models.progress import progress_bar
from nudgeability.splice.assemble import IncompleteRunError, assemble_records
from nudgeability.splice.experiment.conditions import ARM_BASES, CONSISTENCY
from nudgeability.splice.part_check import expected_keys, part_problem
from nudgeability.splice.plan import (
    ARMS_PHASE,
    RESOLVE_PHASE,
    Unit,
    canonical_keys,
    chunk_bounds,
    phases_of,
    shard_chunks,
    units_of,
)
from nudgeability.splice.prepare import Prepared
from nudgeability.splice.resolve import run_resolve_unit
from nudgeability.splice.signal_units import run_consistency_unit
from nudgeability.splice.units import UnitContext, UnitCounts, run_arms_unit, run_base_unit
from nudgeability.splice.work_store import RESOLUTIONS, SIGNALS_DIR, WorkStore


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
    config = prepared.config
    chunks = chunk_bounds(len(prepared.problems), config.chunk_size)
    mine = shard_chunks(len(chunks), config.shard)
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
        for phase in phases_of(prepared.conditions, config.resolve):
            units = units_of([phase], config.seeds, mine)
            with _PhaseBar(phase, units, chunks, progress) as bar:
                for unit in units:
                    if store.has(unit) and _sound(prepared, store, unit, chunks):
                        resumed += 1
                        bar.done(unit, None)
                        continue
                    counts = compute_unit(ctx, store, unit, list(chunks[unit.chunk]))
                    computed += 1
                    bar.done(unit, counts)
        tally, resolved = [0], [0]
        ids = [problem.id for problem in prepared.problems]
        lines = assemble_records(
            ids,
            prepared.conditions,
            config.seeds,
            chunks,
            mine,
            store.read_part,
            store.parts,
            config.consistency_samples,
        )
        path = store.write_records(_counted(lines, tally))
        if config.resolve:
            lines = _assemble_resolutions(prepared, store, chunks, mine)
            store.write_records(_counted(lines, resolved), RESOLUTIONS)
        store.seal()
        return RunResult(path.parent, tally[0], computed, resumed, resolved[0])


def _sound(prepared: Prepared, store: WorkStore, unit: Unit, chunks: list[range]) -> bool:
    """Whether a stored part can be reused; a damaged one is set aside, named in one line."""
    ids = [prepared.problems[i].id for i in chunks[unit.chunk]]
    bases = {}
    if unit.phase == ARMS_PHASE:  # the base parts were checked (or recomputed) in earlier phases
        for base in {c.parent for c in prepared.conditions if c.kind == "arm"}:
            lines = store.read_part(Unit(base, unit.seed, unit.chunk))
            bases[base] = {r["problem_id"]: r for r in map(json.loads, lines)}
    if unit.phase == RESOLVE_PHASE:  # one resolution per TOOL record of the chunk's parts
        expected = _tool_keys(prepared, store, unit.seed, unit.chunk)
    else:
        samples = prepared.config.consistency_samples
        expected = expected_keys(unit, ids, prepared.conditions, bases, samples)
    problem = part_problem(store.part_path(unit), expected)
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


def compute_unit(ctx: UnitContext, store: WorkStore, unit: Unit, indices: list[int]) -> UnitCounts:
    """Compute one unit into `store` (an arms or resolve unit reads the parts it builds on from
    `store`)."""
    prepared = ctx.prepared
    start = time.perf_counter()
    retries_before = ctx.backend.retries
    if unit.phase == RESOLVE_PHASE:
        stored = [p for p in phases_of(prepared.conditions) if p in ARM_BASES or p == ARMS_PHASE]
        parts = {phase: store.read_part(Unit(phase, unit.seed, unit.chunk)) for phase in stored}
        records, counts = run_resolve_unit(ctx, unit.seed, indices, parts)
    elif unit.phase == ARMS_PHASE:
        base_lines = {
            base: store.read_part(Unit(base, unit.seed, unit.chunk))
            for base in ARM_BASES
            if ctx.arms_of[base]
        }
        records, counts = run_arms_unit(ctx, unit.seed, indices, base_lines)
    elif unit.phase == CONSISTENCY:
        records, counts = run_consistency_unit(ctx, unit.phase, unit.seed, indices)
    else:
        # the hidden states' side file is written before the part: a stored part has its states
        signals = (store.root / SIGNALS_DIR / f"{unit.name}.npy", unit.name)
        wanted = signals if ctx.prepared.config.signals else None
        records, counts = run_base_unit(ctx, unit.phase, unit.seed, indices, wanted)
    seconds = time.perf_counter() - start
    counts.retries = ctx.backend.retries - retries_before
    store.write_part(unit, [record.to_json() for record in records])
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


def _assemble_resolutions(
    prepared: Prepared, store: WorkStore, chunks: list[range], mine: list[int]
) -> Iterator[str]:
    """One resolution line per TOOL record of this shard, in the records' canonical order."""
    config = prepared.config
    for chunk in mine:
        tool_keys = set()
        for seed in config.seeds:
            tool_keys |= _tool_keys(prepared, store, seed, chunk)
        found: dict[tuple[str, str, int], str] = {}
        for unit in units_of([RESOLVE_PHASE], config.seeds, [chunk]):
            for line in store.read_part(unit):
                record = json.loads(line)
                key = (record["problem_id"], record["condition"], record["seed"])
                if key in found or key not in tool_keys:
                    raise IncompleteRunError(
                        f"{store.part_path(unit)}: resolution {key} is repeated or has no TOOL "
                        "record; remove the directory and run again"
                    )
                found[key] = line
        ids = [prepared.problems[i].id for i in chunks[chunk]]
        for *key, _ in canonical_keys(ids, prepared.conditions, config.seeds):
            key = tuple(key)  # (problem, condition, seed): resolutions have no sample index
            if key in tool_keys:
                if key not in found:
                    raise IncompleteRunError(
                        f"{store.parts}: no resolution for the TOOL record {key}; remove the "
                        "directory and run again"
                    )
                yield found.pop(key)


def _tool_keys(prepared: Prepared, store: WorkStore, seed: int, chunk: int) -> set:
    """The (problem, condition, seed) keys of the TOOL records in a chunk's parts of one seed."""
    keys = set()
    for unit in units_of(phases_of(prepared.conditions), [seed], [chunk]):
        for record in map(json.loads, store.read_part(unit)):
            if record["action"]["kind"] == TOOL:
                keys.add((record["problem_id"], record["condition"], record["seed"]))
    return keys


def _counted(lines: Iterator[str], tally: list[int]) -> Iterator[str]:
    for line in lines:
        tally[0] += 1
        yield line


class _PhaseBar:
    """A progress bar per phase (tqdm on a terminal, plain lines in a log: models/progress.py): problems done (over all seeds), arms decoded, prompt and generated
    tokens per second of compute (resumed units count as done, with no tokens)."""

    def __init__(self, phase: str, units: list[Unit], chunks: list[range], enabled: bool):
        self.chunks = chunks
        self.arms = phase == ARMS_PHASE
        total = sum(len(chunks[unit.chunk]) for unit in units)
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
