"""Assembling a run's records file from its part files, in canonical order.

The runner writes `records.jsonl` with `assemble_records`, and `nudge verify` re-assembles the
stored parts with the same function to check that the records file is exactly their
concatenation in canonical order: one owner of the order, so the two can never disagree.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from nudgeability.splice.experiment.conditions import Condition, get_condition
from nudgeability.splice.plan import ARMS_PHASE, Unit, canonical_keys, phases_of, units_of


class IncompleteRunError(ValueError):
    """The parts of a run do not add up to its records (a bug or a tampered directory)."""


def assemble_records(
    problem_ids: Sequence[str],
    conditions: Sequence[Condition],
    seeds: Sequence[int],
    chunks: Sequence[range],
    mine: Sequence[int],
    read_part: Callable[[Unit], list[str]],
    parts_dir: Path,
    samples: int = 0,
) -> Iterator[str]:
    """The record lines of the chunks `mine`, chunk by chunk (never all in memory).

    `read_part(unit)` gives a stored unit's lines. Within a chunk, records follow
    `canonical_keys`; every base has a record, an arm is absent only where its base never closed.
    Raises `IncompleteRunError` naming `parts_dir` and the key when parts are missing or doubled.
    """
    phases = phases_of(conditions)
    bases = {c.code for c in conditions if c.kind in ("base", "samples")}
    for chunk in mine:
        found: dict[tuple[str, str, int], str] = {}
        for unit in units_of(phases, seeds, [chunk]):
            for line in read_part(unit):
                record = json.loads(line)
                key = (
                    record["problem_id"],
                    record["condition"],
                    record["seed"],
                    record.get("sample"),  # the self-consistency samples' index, else None
                )
                if key in found:
                    raise IncompleteRunError(
                        f"{parts_dir / (unit.name + '.jsonl')}: record {key} appears twice"
                    )
                found[key] = line
        ids = [problem_ids[i] for i in chunks[chunk]]
        closed: dict[tuple[str, str, int], bool] = {}  # (problem, base, seed) -> base closed
        for key in canonical_keys(ids, conditions, seeds, samples):
            line = found.pop(key, None)
            problem_id, code, seed, _ = key
            if line is not None:
                if code in bases:
                    closed[key[:3]] = json.loads(line)["boundary"] is not None
                yield line
            elif code in bases:  # every base has a record
                raise IncompleteRunError(
                    f"{parts_dir}: no record for {key}; run the same command again: parts are "
                    "checked on resume and a damaged one is recomputed"
                )
            elif closed.get((problem_id, get_condition(code).parent, seed), False):
                # An arm is absent only when its base never closed; this one's base did.
                unit = Unit(ARMS_PHASE, seed, chunk)
                raise IncompleteRunError(
                    f"{parts_dir / (unit.name + '.jsonl')}: unit {unit.name} has no record for "
                    f"arm {code} of problem {problem_id} (seed {seed}), though its base closed "
                    "its thinking; delete that part file and run again to recompute the unit"
                )
        if found:
            raise IncompleteRunError(f"{parts_dir}: unexpected records {sorted(found)[:3]}")
