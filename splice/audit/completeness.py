"""The audit's completeness check: the records file holds the plan's keys, and is its parts' assembly.

`check_completeness(run)` reads the run directory and never writes to it: every (problem,
condition, seed) of the plan once in records.jsonl, in canonical order; arms absent exactly where
their base's record never closed its thinking; each part file sound as a resume checks it
(splice/rundir/part_check.py); and records.jsonl equal, line by line, to the part files assembled
by the runner's own code (splice/rundir/assemble.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from itertools import zip_longest
from pathlib import Path

from nudgeability.splice.audit.check import FAIL, OK, Check, summary
from nudgeability.splice.audit.record_diff import first_difference
from nudgeability.splice.audit.stored_run import StoredRun
from nudgeability.splice.experiment.conditions import BASE_CODES, Condition
from nudgeability.splice.rundir.assemble import IncompleteRunError, assemble_records
from nudgeability.splice.rundir.layout import PARTS, RECORDS
from nudgeability.splice.rundir.part_check import base_records, part_problem
from nudgeability.splice.rundir.plan import RESOLVE_PHASE, Unit
from nudgeability.splice.rundir.records import RecordKey, boundary_of
from nudgeability.splice.rundir.seal import part_files
from nudgeability.splice.rundir.store import part_path
from nudgeability.util.json_lines import json_lines, split_lines


def check_completeness(run: StoredRun) -> Check:
    """Every (problem, condition, seed) of the plan once in records.jsonl, in canonical order;
    arms absent exactly where their base's record never closed its thinking; records.jsonl equal
    to the part files assembled by the runner's own code."""
    path = run.root / RECORDS
    if not path.is_file():
        return Check("completeness", FAIL, f"{path}: missing; the run did not finish")
    try:
        keys, boundaries, cuts = _read_keys(path)
    except _Unreadable as exc:
        return Check("completeness", FAIL, str(exc))
    expected = list(_expected_keys(run, boundaries, cuts))
    problems = _key_problems(path, keys, expected, boundaries, run.plan.conditions)
    if not problems:
        problems = _part_problems(run, path)
    if problems:
        return Check("completeness", FAIL, summary(problems, "problems"))
    arms = sum(1 for key in keys if key not in boundaries)
    return Check(
        "completeness",
        OK,
        f"{len(keys)} records ({len(keys) - arms} bases, {arms} arms): "
        f"the plan's keys once each, in canonical order; {RECORDS} is the assembly of "
        f"{len(run.units())} part files",
    )


class _Unreadable(ValueError):
    """A line of a records file that is not UTF-8, not JSON or not a record; the message names it."""


def _lines(path: Path) -> Iterator[str]:
    """A JSONL file's lines as stored, each checked to be JSON (the one JSON-lines reader)."""
    for line in json_lines(path, _Unreadable, objects=False, skip_blank=False):
        yield line.text


def _read_keys(path: Path) -> tuple[list[RecordKey], dict[RecordKey, int | None], dict]:
    """Each record's key, each base record's boundary, and each base record's extra cuts."""
    keys: list[RecordKey] = []
    boundaries: dict[RecordKey, int | None] = {}
    cuts: dict[RecordKey, list[int]] = {}
    for line in json_lines(path, _Unreadable, objects=False, skip_blank=False):
        try:
            record = line.value
            key = RecordKey.of(record)
            hash(key)  # a tampered field could hold a list
            if key.condition in BASE_CODES:
                boundaries.setdefault(key, boundary_of(record))
                cuts.setdefault(key, [int(at) for at in record.get("cuts") or ()])
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise _Unreadable(f"{path}:{line.number}: not a record (field {exc})") from None
        keys.append(key)
    return keys, boundaries, cuts


def _expected_keys(
    run: StoredRun, boundaries: dict[RecordKey, int | None], cuts: dict[RecordKey, list[int]]
) -> Iterator[RecordKey]:
    """The plan's keys in canonical order; an arm only where its base's record closed, at the
    paper's cut and then at each extra cut its base lists."""
    parents = {c.code: c.base for c in run.plan.conditions if c.kind == "arm"}
    for chunk in run.plan.mine:
        for key in run.plan.keys(chunk):
            parent = parents.get(key.condition)
            if parent is None:
                yield key
            elif boundaries.get(key._replace(condition=parent)) is not None:
                yield from run.plan.arm_keys(key, cuts[key._replace(condition=parent)])


def _key_problems(
    path: Path,
    keys: list[RecordKey],
    expected: list[RecordKey],
    boundaries: dict[RecordKey, int | None],
    conditions: Sequence[Condition],
) -> list[str]:
    where = {}
    problems = []
    for number, key in enumerate(keys, 1):
        if key in where:
            problems.append(
                f"{path}:{number}: record {key} appears twice (first at line {where[key]})"
            )
        else:
            where[key] = number
    parents = {c.code: c.base for c in conditions}
    for key in expected:
        if key not in where:
            parent = parents.get(key.condition)
            why = "" if parent is None else f", though its base {parent} closed its thinking"
            problems.append(f"{path}: no record for {key}{why}")
    wanted = set(expected)
    for number, key in enumerate(keys, 1):
        if key in wanted:
            continue
        base = key._replace(condition=parents.get(key.condition), sample=None, at=None)
        if base in boundaries and boundaries[base] is None:
            problems.append(
                f"{path}:{number}: arm record {key}, but its base {base.condition} never closed its "
                f"thinking (line {where[base]}: boundary null)"
            )
        elif base.condition is not None and base not in boundaries:
            problems.append(f"{path}:{number}: arm record {key}, but no record of its base")
        else:
            problems.append(f"{path}:{number}: record {key} is not in the manifest's plan")
    if not problems and Counter(keys) == Counter(expected) and keys != expected:
        number = next(i for i, (a, b) in enumerate(zip(keys, expected)) if a != b)
        problems.append(
            f"{path}:{number + 1}: record {keys[number]} is out of canonical order "
            f"(expected {expected[number]} there)"
        )
    return problems


def _part_problems(run: StoredRun, path: Path) -> list[str]:
    """The plan's part files exist, no others, and assemble into records.jsonl exactly."""
    units = run.units()
    names = {part_path(run.root, unit).name for unit in units}
    problems = [
        f"{part_path(run.root, unit)}: missing (a unit of the plan)"
        for unit in units
        if not part_path(run.root, unit).is_file()
    ]
    problems += [
        f"{extra}: not a unit of the manifest's plan"
        for extra in part_files(run.root)
        if extra.name not in names
    ]
    problems += _unsound_parts(run, units)
    if problems:
        return problems

    def read_part(unit: Unit) -> list[str]:  # each one checked by _unsound_parts
        return split_lines(part_path(run.root, unit).read_text(encoding="utf-8"))

    assembled = assemble_records(run.plan, read_part, run.root / PARTS)
    try:
        for number, (line, ours) in enumerate(zip_longest(_lines(path), assembled), 1):
            if ours is None:
                return [f"{path}:{number}: one record more than the part files assemble to"]
            if line is None:
                return [f"{path}: ends at line {number - 1}; the part files hold more records"]
            if line != ours:
                diff = first_difference(ours, line, (PARTS, RECORDS))
                return [f"{path}:{number}: differs from the part files: {diff}"]
    except (_Unreadable, IncompleteRunError) as exc:
        return [str(exc)]
    return []


def _unsound_parts(run: StoredRun, units: list[Unit]) -> list[str]:
    """Each part checked as a resume checks it (`part_check.py`): UTF-8, JSON records, exactly
    its unit's keys (an arms unit's from its base parts' boundaries)."""
    problems = []
    damaged: set[Unit] = set()
    for unit in units:
        path = part_path(run.root, unit)
        if not path.is_file() or unit.phase == RESOLVE_PHASE:  # resolutions: not records
            continue
        inputs = run.plan.inputs_of(unit)
        if any(b in damaged or not part_path(run.root, b).is_file() for b in inputs):
            continue  # its bases are reported; the arms cannot be checked against them
        bases = base_records(run.plan, unit, lambda u: part_path(run.root, u))
        problem = part_problem(path, run.plan.expected_keys(unit, bases))
        if problem is not None:
            damaged.add(unit)
            problems.append(f"{path}: {problem}")
    return problems
