"""Checking a stored part file before a resumed run reuses it.

Part files are written atomically, so a run's own kill never leaves a damaged one; but a disk
error, a copy cut short or a hand edit can. A part is sound when it is UTF-8, ends with a newline
(or is empty), every line is a JSON record, and its records are exactly the unit's expected
(problem, condition, seed) keys:

- a base unit (NT, B, oracle_B): one record per problem of its chunk;
- the self-consistency unit: K records per problem, keyed with their `sample` 0..K-1;
- the arms unit: one record per arm of each problem whose base closed its thinking (its base
  record's `boundary` is not null), which is read from the base parts, checked before.

A damaged part is set aside and its unit recomputed; nothing else is lost.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from nudgeability.splice.experiment.conditions import CONSISTENCY, Condition
from nudgeability.splice.plan import ARMS_PHASE, Unit
from nudgeability.splice.work_store import split_lines

Key = tuple  # (problem, condition, seed), and the sample index for a self-consistency record


def expected_keys(
    unit: Unit,
    problem_ids: Sequence[str],
    conditions: Sequence[Condition],
    base_records: dict[str, dict[str, dict]],
    samples: int = 0,
) -> set[Key]:
    """The (problem, condition, seed) keys `unit` must hold; `base_records` maps each base with
    arms to {problem id: its record} for the same seed and chunk (unused for a base unit). The
    self-consistency unit holds `samples` records per problem, keyed (problem, condition, seed,
    sample)."""
    if unit.phase == CONSISTENCY:
        return {(pid, unit.phase, unit.seed, k) for pid in problem_ids for k in range(samples)}
    if unit.phase != ARMS_PHASE:
        return {(pid, unit.phase, unit.seed) for pid in problem_ids}
    keys = set()
    for base, records in base_records.items():
        arms = [c.code for c in conditions if c.kind == "arm" and c.parent == base]
        for pid in problem_ids:
            if records[pid].get("boundary") is not None:
                keys.update((pid, arm, unit.seed) for arm in arms)
    return keys


def read_records(path: Path) -> tuple[list[dict] | None, str | None]:
    """(records, None) for a readable part, or (None, what is wrong with it)."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 at byte {exc.start}"
    if text and not text.endswith("\n"):
        return None, "truncated (its last line has no newline)"
    records = []
    for number, line in enumerate(split_lines(text), 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            return None, f"line {number} is not valid JSON ({exc.msg})"
        if not isinstance(record, dict) or not {"problem_id", "condition", "seed"} <= set(record):
            return None, f"line {number} is not a record"
        records.append(record)
    return records, None


def part_problem(path: Path, expected: set[Key]) -> str | None:
    """What is wrong with the part at `path` given the keys it must hold; None when it is sound."""
    records, problem = read_records(path)
    if problem is not None:
        return problem
    found = [
        (r["problem_id"], r["condition"], r["seed"])
        + (() if r.get("sample") is None else (r["sample"],))
        for r in records
    ]
    if len(set(found)) != len(found):
        return "a record appears twice"
    missing, extra = expected - set(found), set(found) - expected
    if missing:
        return f"{len(missing)} record(s) missing, e.g. {sorted(missing)[0]}"
    if extra:
        return f"{len(extra)} record(s) of another unit, e.g. {sorted(extra)[0]}"
    return None
