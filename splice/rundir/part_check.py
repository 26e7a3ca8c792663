"""Checking a stored part file before a resumed run reuses it (and before `nudge verify` trusts it).

Part files are written atomically, so a run's own kill never leaves a damaged one; but a disk
error, a copy cut short or a hand edit can. A part is sound when it is UTF-8, ends with a newline
(or is empty), every line is a JSON record, and its records are exactly the unit's expected keys
(`Plan.expected_keys`: one record per problem of a base unit, K per problem of the
self-consistency unit, one per arm of each problem whose base closed its thinking).

A damaged part is set aside and its unit recomputed; nothing else is lost.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from nudgeability.splice.rundir.plan import ARMS_PHASE, Plan, Unit
from nudgeability.splice.rundir.records import RecordKey
from nudgeability.util.json_lines import JsonLinesError, json_lines

_KEY_FIELDS = frozenset(RecordKey._fields) - {"sample", "at"}  # what every record has


def read_records(path: Path) -> tuple[list[dict] | None, str | None]:
    """(records, None) for a readable part, or (None, what is wrong with it)."""
    if not _ends_with_newline(path):
        return None, "truncated (its last line has no newline)"
    records = []
    try:
        for line in json_lines(path, objects=False, skip_blank=False):
            if not isinstance(line.value, dict) or not _KEY_FIELDS <= set(line.value):
                return None, f"line {line.number} is not a record"
            records.append(line.value)
    except JsonLinesError as exc:
        return None, f"line {exc.line} is {exc.reason}"
    return records, None


def _ends_with_newline(path: Path) -> bool:
    """Whether the file is empty or its last byte is a newline (else its last line was cut)."""
    with open(path, "rb") as handle:
        if handle.seek(0, os.SEEK_END) == 0:
            return True
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def part_problem(path: Path, expected: set[RecordKey]) -> str | None:
    """What is wrong with the part at `path` given the keys it must hold; None when it is sound."""
    records, problem = read_records(path)
    if problem is not None:
        return problem
    found = [RecordKey.of(record) for record in records]
    if len(set(found)) != len(found):
        return "a record appears twice"
    missing, extra = expected - set(found), set(found) - expected
    if extra:  # said first: a part holding another unit's records also misses its own
        instead = f" instead of {len(missing)} of its own" if missing else ""
        return f"it holds {len(extra)} record(s) of another unit, e.g. {min(extra, key=_order)}{instead}"
    if missing:
        return f"{len(missing)} record(s) missing, e.g. {min(missing, key=_order)}"
    return None


def _order(key: RecordKey) -> tuple:
    return key.order


def base_records(plan: Plan, unit: Unit, path_of: Callable[[Unit], Path]) -> dict[str, dict]:
    """What `Plan.expected_keys` reads for an arms unit: each base with arms -> {problem id: its
    record}, from the base parts at `path_of(base unit)` (checked before: a base phase runs, and
    is checked, before the arms); {} for any other unit."""
    if unit.phase != ARMS_PHASE:
        return {}
    bases = {}
    for base_unit in plan.inputs_of(unit):
        records, _ = read_records(path_of(base_unit))
        bases[base_unit.phase] = {record["problem_id"]: record for record in records}
    return bases
