"""Auditing a finished run directory: its inputs, completeness and integrity (replay: replay.py).

    run = open_run("runs/smollm2-strategyqa-greedy")
    checks = [check_inputs(run), check_completeness(run), check_integrity(run)]

Each check reads the run directory and never writes to it, and returns one `Check`: a status and
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
from nudgeability.splice.conditions import (
    BASE_CODES,
    CONDITIONS,
    Condition,
    UnknownConditionError,
    parse_conditions,
)
from nudgeability.splice.manifest import (
    SEAL_KEY,
    compare_manifests,
    git_commit,
    package_versions,
    sha256_file,
)
from nudgeability.splice.plan import (
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


@dataclass(frozen=True)
class Check:
    """The outcome of one check: `status` is ok, FAIL, unsealed or skipped; `detail` one line."""

    name: str  # "inputs" | "completeness" | "integrity" | "replay"
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

    def units(self) -> list[Unit]:
        """This run's units of work, in order of work."""
        return units_of(phases_of(self.conditions), self.seeds, self.mine)


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
        conditions = tuple(parse_conditions(config["conditions"]))
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
    return StoredRun(root, manifest, problems, conditions, seeds, chunks, mine)


def _summary(problems: list[str], what: str) -> str:
    """The first problem, and how many there are in all."""
    more = f" (and {len(problems) - 1} more {what})" if len(problems) > 1 else ""
    return problems[0] + more


# ----- 1. inputs -----------------------------------------------------------------------------------
def check_inputs(
    run: StoredRun, model: str | None = None, data: str | None = None, sentences: str | None = None
) -> Check:
    """Re-hash the checkpoint, data and sentences files (from the bytes, never a cached hash)
    and compare them with the manifest; `model`, `data`, `sentences` give moved files again.
    Package versions and the git commit that differ are warnings."""
    from nudgeability.models.loader import resolve

    inputs = run.manifest.get("inputs", {})
    problems = []
    for name, override in (("data", data), ("sentences", sentences)):
        stored = inputs.get(name, {})
        path = override or stored.get("path")
        problems.extend(_compare_file(f"{name} file", path, stored, f"--{name}"))
    stored = inputs.get("checkpoint", {})
    spec = model or run.manifest["config"]["model"]
    try:
        source = resolve(spec)
    except (ValueError, OSError) as exc:
        problems.append(f"checkpoint {spec}: cannot be found here ({exc}); pass it with --model")
        source = None
    if source is not None:
        files = {path.name: path for path in source.files}
        stored_files = stored.get("files", {})
        for name in sorted(set(files) | set(stored_files)):
            if name not in files:
                problems.append(f"checkpoint file {source.directory / name}: missing")
            elif name not in stored_files:
                problems.append(f"checkpoint file {files[name]}: not in the manifest")
            else:
                problems.extend(
                    _compare_file("checkpoint file", files[name], {"sha256": stored_files[name]})
                )
        gguf = stored.get("gguf")
        if (gguf is None) != (source.gguf is None):
            problems.append(f"checkpoint {spec}: GGUF {source.gguf}, the manifest says {gguf}")
        elif gguf is not None:
            problems.extend(_compare_file("checkpoint GGUF", source.gguf, gguf, "--model"))
    now = {"versions": package_versions(), "git_commit": git_commit()}
    _, changed = compare_manifests(
        {k: run.manifest.get(k) for k in now}, now, ("the run had", "this checkout has")
    )
    if problems:
        return Check("inputs", FAIL, _summary(problems, "input problems"), tuple(changed))
    count = len(stored.get("files", {})) + (stored.get("gguf") is not None)
    detail = (
        f"checkpoint ({count} files), data and sentences files re-hashed: equal to the manifest"
    )
    return Check("inputs", OK, detail, tuple(changed))


def _compare_file(what: str, path: str | Path | None, stored: dict, flag: str = "") -> list[str]:
    """[] when the file's bytes hash to `stored["sha256"]`; else the one-line problem (a missing
    input names the `flag` that gives its new place)."""
    if path is None or not Path(path).is_file():
        hint = f"; if it moved, pass its new place with {flag}" if flag else ""
        return [f"{what} {path}: missing{hint}"]
    digest = sha256_file(path, cached=False)
    if digest != stored.get("sha256"):
        return [
            f"{what} {path}: sha256 {digest[:12]}…, the manifest recorded "
            f"{str(stored.get('sha256'))[:12]}… (the file changed)"
        ]
    return []


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
        return Check("completeness", FAIL, _summary(problems, "problems"))
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


Key = tuple[str, str, int]


def _read_keys(path: Path) -> tuple[list[Key], dict[Key, int | None]]:
    """Each record's (problem, condition, seed), and each base record's boundary."""
    keys: list[Key] = []
    boundaries: dict[Key, int | None] = {}
    for number, line in enumerate(_lines(path), 1):
        try:
            record = json.loads(line)
            key = (record["problem_id"], record["condition"], record["seed"])
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
        for key in canonical_keys(ids, run.conditions, run.seeds):
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
    if problems:
        return problems

    def read_part(unit: Unit) -> list[str]:
        lines = list(_lines(part_path(run.root, unit)))
        for number, line in enumerate(lines, 1):
            try:
                json.loads(line)
            except json.JSONDecodeError as exc:
                raise _Unreadable(
                    f"{part_path(run.root, unit)}:{number}: not valid JSON ({exc.msg})"
                ) from None
        return lines

    assembled = assemble_records(
        run.problem_ids,
        run.conditions,
        run.seeds,
        run.chunks,
        run.mine,
        read_part,
        run.root / PARTS,
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


# ----- 3. integrity --------------------------------------------------------------------------------
def check_integrity(run: StoredRun) -> Check:
    """records.jsonl and every part file against the sha256 sealed in the manifest."""
    seal = run.manifest.get(SEAL_KEY)
    if seal is None:
        return Check(
            "integrity",
            UNSEALED,
            f"{run.root / MANIFEST} holds no seal (a run made before sealing existed, or one "
            "that never finished): the records cannot be checked against hashes",
        )
    problems = []
    records = run.root / RECORDS
    stored_records = seal.get("records", {})
    problems += _compare_file("records file", records, stored_records) if records.is_file() else []
    if not records.is_file():
        problems.append(f"{records}: missing, though the manifest is sealed")
    sealed_parts = seal.get("parts", {})
    present = {path.name: path for path in (run.root / PARTS).glob("*.jsonl")}
    for name in sorted(set(sealed_parts) | set(present)):
        if name not in present:
            problems.append(f"{run.root / PARTS / name}: missing, though the seal lists it")
        elif name not in sealed_parts:
            problems.append(f"{present[name]}: not in the manifest's seal")
        else:
            problems += _compare_file("part file", present[name], {"sha256": sealed_parts[name]})
    if problems:
        return Check("integrity", FAIL, _summary(problems, "integrity problems"))
    return Check(
        "integrity",
        OK,
        f"records.jsonl and {len(sealed_parts)} part files match the sha256 sealed in the manifest",
    )
