"""Auditing a finished run directory: the run's plan, the check results, and completeness.

    run = open_run("runs/smollm2-strategyqa-greedy")
    checks = [check_inputs(run), check_completeness(run), check_integrity(run)]

`check_inputs` and `check_integrity` (hashes) live in verify_hashes.py, the replay in replay.py,
the command in verify_cli.py. Each check reads the run directory and never writes to it, and returns one `Check`: a status and
one line naming the first problem found (and how many there are in all), so that an auditor sees
the cause at once. The plan (problems, conditions, seeds, chunks, this shard's units) is rebuilt
from the manifest with the runner's own plan code (`plan.py`, `assemble.py`), never a copy.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

from nudgeability.splice.assemble import IncompleteRunError, assemble_records
from nudgeability.splice.experiment.conditions import (
    BASE_CODES,
    CONDITIONS,
    Condition,
    UnknownConditionError,
    parse_conditions,
    with_consistency,
)
from nudgeability.splice.part_check import expected_keys, part_problem, read_records
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
from nudgeability.splice.record_diff import first_difference
from nudgeability.splice.work_store import (
    MANIFEST,
    PARTS,
    RECORDS,
    OutputDirError,
    part_path,
    read_manifest,
)

OK, FAIL, UNSEALED, SKIPPED = "ok", "FAIL", "unsealed", "skipped"
NOT_CHECKABLE = "not checkable"  # what a remote run's files cannot show (its weights)


@dataclass(frozen=True)
class Check:
    """The outcome of one check: `status` is ok, FAIL, unsealed, skipped or not checkable;
    `detail` one line."""

    name: str  # "inputs" | "weights" (a remote run) | "completeness" | "integrity" | "replay"
    status: str
    detail: str
    warnings: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def line(self) -> str:
        text = f"{self.name}: {self.status}: {self.detail}"
        return text + "".join(f"; warning: {warning}" for warning in self.warnings)


@dataclass(frozen=True)
class StoredRun:
    """A run directory and the plan its manifest calls for."""

    root: Path
    manifest: dict = field(repr=False)
    problem_ids: tuple[str, ...]
    conditions: tuple[Condition, ...]
    seeds: tuple[int, ...]
    chunks: tuple[range, ...]
    mine: tuple[int, ...]  # the chunks this run (or shard) computes
    samples: int = 0  # --consistency-samples K: K records per problem of the consistency unit

    def units(self) -> list[Unit]:
        """This run's units of work, in order of work."""
        resolve = bool(self.manifest["config"].get("resolve"))
        return units_of(phases_of(self.conditions, resolve), self.seeds, self.mine)


def open_run(root: str | Path) -> StoredRun:
    """Read a run directory's manifest and rebuild its plan (OutputDirError naming the field)."""
    root = Path(root)
    if not root.is_dir():
        raise OutputDirError(f"{root}: no such directory; pass a run directory of `nudge run`")
    manifest = read_manifest(root)
    where = root / MANIFEST
    try:
        config = manifest["config"]
        problems = tuple(manifest["problems"])
        samples = int(config.get("consistency_samples") or 0)
        conditions = tuple(with_consistency(parse_conditions(config["conditions"]), samples))
        seeds = tuple(int(seed) for seed in config["seeds"])
        chunks = tuple(chunk_bounds(len(problems), int(config["chunk_size"])))
        shard = config["shard"]
        mine = tuple(shard_chunks(len(chunks), None if shard is None else tuple(shard)))
    except (KeyError, TypeError, ValueError) as exc:
        what = exc.args[0] if isinstance(exc, KeyError) else exc
        if isinstance(exc, UnknownConditionError):
            what = f"config.conditions: {exc}"
        raise OutputDirError(
            f"{where}: field {what} missing or malformed; not a manifest of `nudge run`"
        ) from None
    return StoredRun(root, manifest, problems, conditions, seeds, chunks, mine, samples)


def summary(problems: list[str], what: str) -> str:
    """The first problem, and how many there are in all."""
    more = f" (and {len(problems) - 1} more {what})" if len(problems) > 1 else ""
    return problems[0] + more


# ----- 2. completeness -----------------------------------------------------------------------------
def check_completeness(run: StoredRun) -> Check:
    """Every (problem, condition, seed) of the plan once in records.jsonl, in canonical order;
    arms absent exactly where their base's record never closed its thinking; records.jsonl equal
    to the part files assembled by the runner's own code."""
    path = run.root / RECORDS
    if not path.is_file():
        return Check("completeness", FAIL, f"{path}: missing; the run did not finish")
    try:
        keys, boundaries = _read_keys(path)
    except _Unreadable as exc:
        return Check("completeness", FAIL, str(exc))
    expected = list(_expected_keys(run, boundaries))
    problems = _key_problems(path, keys, expected, boundaries)
    if not problems:
        problems = _part_problems(run, path)
    if problems:
        return Check("completeness", FAIL, summary(problems, "problems"))
    arms = sum(1 for key in keys if key not in boundaries)
    return Check(
        "completeness",
        OK,
        f"{len(keys)} records ({len(keys) - arms} bases, {arms} arms): "
        f"the plan's keys once each, in canonical order; records.jsonl is the assembly of "
        f"{len(run.units())} part files",
    )


class _Unreadable(ValueError):
    """A line of a records or part file that is not UTF-8 or not JSON; the message names it."""


def _lines(path: Path) -> Iterator[str]:
    """A JSONL file's lines, split at "\n" only (a text may hold U+2028), decoded one by one."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise _Unreadable(f"{path}:{number}: not valid UTF-8 (a damaged line)") from None
            yield text[:-1] if text.endswith("\n") else text


# (problem, condition, seed), and the sample index for the self-consistency samples
Key = tuple[str, str, int] | tuple[str, str, int, int]


def _read_keys(path: Path) -> tuple[list[Key], dict[Key, int | None]]:
    """Each record's (problem, condition, seed), and each base record's boundary."""
    keys: list[Key] = []
    boundaries: dict[Key, int | None] = {}
    for number, line in enumerate(_lines(path), 1):
        try:
            record = json.loads(line)
            key = (record["problem_id"], record["condition"], record["seed"])
            if record.get("sample") is not None:
                key += (record["sample"],)
            hash(key)  # a tampered field could hold a list
            if record["condition"] in BASE_CODES:
                boundaries.setdefault(key, record["boundary"])
        except json.JSONDecodeError as exc:
            raise _Unreadable(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        except (KeyError, TypeError) as exc:
            raise _Unreadable(f"{path}:{number}: not a record (field {exc})") from None
        keys.append(key)
    return keys, boundaries


def _expected_keys(run: StoredRun, boundaries: dict[Key, int | None]) -> Iterator[Key]:
    """The plan's keys in canonical order; an arm only where its base's record closed."""
    parents = {c.code: c.parent for c in run.conditions if c.kind == "arm"}
    for chunk in run.mine:
        ids = [run.problem_ids[i] for i in run.chunks[chunk]]
        for *key, sample in canonical_keys(ids, run.conditions, run.seeds, run.samples):
            key = tuple(key) if sample is None else (*key, sample)
            parent = parents.get(key[1])
            if parent is None or boundaries.get((key[0], parent, key[2])) is not None:
                yield key


def _key_problems(
    path: Path, keys: list[Key], expected: list[Key], boundaries: dict[Key, int | None]
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
    parents = {c.code: c.parent for c in CONDITIONS}
    for key in expected:
        if key not in where:
            parent = parents.get(key[1])
            why = "" if parent is None else f", though its base {parent} closed its thinking"
            problems.append(f"{path}: no record for {key}{why}")
    wanted = set(expected)
    for number, key in enumerate(keys, 1):
        if key in wanted:
            continue
        base = (key[0], parents.get(key[1]), key[2])
        if base in boundaries and boundaries[base] is None:
            problems.append(
                f"{path}:{number}: arm record {key}, but its base {base[1]} never closed its "
                f"thinking (line {where[base]}: boundary null)"
            )
        elif base[1] is not None and base not in boundaries:
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
        for extra in sorted((run.root / PARTS).glob("*.jsonl"))
        if extra.name not in names
    ]
    problems += _unsound_parts(run, units)
    if problems:
        return problems

    def read_part(unit: Unit) -> list[str]:
        return list(_lines(part_path(run.root, unit)))  # each one checked by _unsound_parts

    assembled = assemble_records(
        run.problem_ids,
        run.conditions,
        run.seeds,
        run.chunks,
        run.mine,
        read_part,
        run.root / PARTS,
        samples=run.samples,
    )
    try:
        for number, (line, ours) in enumerate(zip_longest(_lines(path), assembled), 1):
            if ours is None:
                return [f"{path}:{number}: one record more than the part files assemble to"]
            if line is None:
                return [f"{path}: ends at line {number - 1}; the part files hold more records"]
            if line != ours:
                diff = first_difference(ours, line, ("parts", "records.jsonl"))
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
        ids = [run.problem_ids[i] for i in run.chunks[unit.chunk]]
        bases = {}
        if unit.phase == ARMS_PHASE:
            parents = {c.parent for c in run.conditions if c.kind == "arm"}
            base_units = [Unit(base, unit.seed, unit.chunk) for base in sorted(parents)]
            if any(b in damaged or not part_path(run.root, b).is_file() for b in base_units):
                continue  # its bases are reported; the arms cannot be checked against them
            for base, base_unit in zip(sorted(parents), base_units):
                records, _ = read_records(part_path(run.root, base_unit))
                bases[base] = {record["problem_id"]: record for record in records}
        problem = part_problem(path, expected_keys(unit, ids, run.conditions, bases, run.samples))
        if problem is not None:
            damaged.add(unit)
            problems.append(f"{path}: {problem}")
    return problems
