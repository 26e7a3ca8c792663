"""Assembling a run's records (and resolutions) files from its part files, in canonical order.

The runner writes `records.jsonl` with `assemble_records` and `resolutions.jsonl` with
`assemble_resolutions`, and `nudge verify` re-assembles the stored parts with the same function to
check that the records file is exactly their concatenation in canonical order: one owner of the
order (the `Plan`), so the two can never disagree.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

from nudgeability.models.families import TOOL
from nudgeability.splice.rundir.layout import PART_SUFFIX
from nudgeability.splice.rundir.plan import ARMS_PHASE, RESOLVE_PHASE, Plan, Unit
from nudgeability.splice.rundir.records import Record, RecordKey

ReadPart = Callable[[Unit], list[str]]  # a stored unit's record lines


class IncompleteRunError(ValueError):
    """The parts of a run do not add up to its records (a bug or a tampered directory)."""


def _part_name(parts_dir: Path, unit: Unit) -> Path:
    return parts_dir / f"{unit.name}{PART_SUFFIX}"


def assemble_records(plan: Plan, read_part: ReadPart, parts_dir: Path) -> Iterator[str]:
    """The record lines of this run's chunks, chunk by chunk (never all in memory).

    Within a chunk, records follow `Plan.keys`; every base has a record, an arm is absent only
    where its base never closed. Raises `IncompleteRunError` naming `parts_dir` and the key when
    parts are missing or doubled.
    """
    for chunk in plan.mine:
        found: dict[RecordKey, str] = {}
        for unit in plan.units_of_chunk(chunk, plan.record_phases):
            for line in read_part(unit):
                key = RecordKey.of(json.loads(line))
                if key in found:
                    raise IncompleteRunError(
                        f"{_part_name(parts_dir, unit)}: record {tuple(key)} appears twice"
                    )
                found[key] = line
        closed: dict[RecordKey, bool] = {}  # (problem, base, seed) -> base closed
        cuts: dict[RecordKey, list[int]] = {}  # (problem, base, seed) -> its extra cuts
        for key in plan.keys(chunk):
            line = found.pop(key, None)
            if line is not None:
                if key.condition in plan.base_codes:
                    data = json.loads(line)
                    closed[key._replace(sample=None)] = data["boundary"] is not None
                    cuts[key._replace(sample=None)] = data.get("cuts") or []
                    yield line
                    continue
                yield line
                base = key._replace(condition=plan.condition(key.condition).base)
                # the arm's further samples, then its records at each extra cut of its base
                for more in plan.arm_keys(key, cuts.get(base, []))[1:]:
                    extra = found.pop(more, None)
                    if extra is None:
                        raise IncompleteRunError(
                            f"{_part_name(parts_dir, Unit(ARMS_PHASE, key.seed, chunk))}: no "
                            f"record {more}, though its base closed its thinking; delete that "
                            "part file and run again to recompute the unit"
                        )
                    yield extra
            elif key.condition in plan.base_codes:  # every base has a record
                raise IncompleteRunError(
                    f"{parts_dir}: no record for {tuple(key)}; run the same command again: parts "
                    "are checked on resume and a damaged one is recomputed"
                )
            elif closed.get(key._replace(condition=plan.condition(key.condition).base), False):
                # An arm is absent only when its base never closed; this one's base did.
                unit = Unit(ARMS_PHASE, key.seed, chunk)
                raise IncompleteRunError(
                    f"{_part_name(parts_dir, unit)}: unit {unit.name} has no record for "
                    f"arm {key.condition} of problem {key.problem_id} (seed {key.seed}), though "
                    "its base closed its thinking; delete that part file and run again to "
                    "recompute the unit"
                )
        if found:
            raise IncompleteRunError(
                f"{parts_dir}: unexpected records {sorted(tuple(k) for k in found)[:3]}"
            )


def tool_keys(plan: Plan, read_part: ReadPart, seed: int, chunk: int) -> set[RecordKey]:
    """The keys of the TOOL records that a chunk's resolution unit (one seed) must resolve."""
    keys = set()
    for unit in plan.inputs_of(Unit(RESOLVE_PHASE, seed, chunk)):
        for record in map(Record.from_json, read_part(unit)):
            if record.action.kind == TOOL:
                keys.add(RecordKey.of(record))
    return keys


def assemble_resolutions(plan: Plan, read_part: ReadPart, parts_dir: Path) -> Iterator[str]:
    """One resolution line per TOOL record of this run's chunks, in the records' canonical order;
    `IncompleteRunError` naming the part and key of a resolution repeated, unasked or missing."""
    for chunk in plan.mine:
        wanted = set()
        for seed in plan.seeds:
            wanted |= tool_keys(plan, read_part, seed, chunk)
        found: dict[RecordKey, str] = {}
        for unit in plan.units_of_chunk(chunk, (RESOLVE_PHASE,)):
            for line in read_part(unit):
                key = RecordKey.of(json.loads(line))
                if key in found or key not in wanted:
                    raise IncompleteRunError(
                        f"{_part_name(parts_dir, unit)}: resolution {key} is repeated or has no "
                        "TOOL record; remove the directory and run again"
                    )
                found[key] = line
        for key in plan.keys(chunk):
            if key in wanted:
                if key not in found:
                    raise IncompleteRunError(
                        f"{parts_dir}: no resolution for the TOOL record {key}; remove the "
                        "directory and run again"
                    )
                yield found.pop(key)
