"""The join from run directories to experiment tables: the one place records become arrays.

A run directory holds manifest.json (its "experiment": model, task, decoding, seeds) and
records.jsonl, one JSON object per (problem, condition, seed) in the schema of
nudgeability.splice.experiment.records.Record. This module reads the JSON directly (data flows one way:
stats never imports the runner). Rules of the join:

- one table row per (problem, seed) seen in the records; problems in order of first appearance,
  seeds ascending; the rows of one problem share a cluster;
- s from the NT record: grade.correct True -> 1, False -> 0; None, no grade, a TRUNC action or
  no NT record -> -1 (unknown);
- base from the B record's action; -1 without a B record;
- correct['B'] / correct['oracle_B']: the grade of a SELF answer (1 / 0), else -1;
- every other condition becomes an arm, as does every condition the manifest's config asked for
  (so a run whose B never closed its thinking still has its conf/doubt arrays, all -1); where B
  (or oracle_B for the oracle arms) never closed its thinking (boundary null) the arms are -1, as
  are arms without a record;
- run directories whose manifests name the same (model, task, decoding) are joined into one
  experiment only when their manifests agree on everything that defines it (`defining_settings`:
  the config but for its shard, decoding seeds, batching, device and file locations, and the
  sha256 of the checkpoint, data and sentences); otherwise RecordsError names the differing keys.
  A label given per run directory (`nudge stats --label DIR=NAME`) keeps runs apart: the row's
  model reads "model (NAME)";
- a repeated (problem, condition, seed) is an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from nudgeability.backends.names import CONTINUATION_LEVELS
from nudgeability.splice.experiment.conditions import (
    BASE_CODES,
    CONDITIONS,
    NO_TOOL_BASE,
    TOOL_BASE,
)
from nudgeability.splice.rundir.layout import MANIFEST, RECORDS, read_json_lines

from .action_table import ExperimentLabel, ExperimentTable
from .actions import NONE, SELF, TRUNC, action_code, competence_code

_PARENTS = {condition.code: condition.parent for condition in CONDITIONS}
_REQUIRED = ("problem_id", "task", "condition", "seed", "action")
# Config keys that may differ between runs pooled into one experiment: how the work was split or
# batched, where it ran, and where the inputs were found (their sha256 are compared instead).
POOLABLE_CONFIG_KEYS = frozenset(
    {"shard", "seeds", "chunk_size", "max_batch_tokens", "device", "model", "data", "sentences"}
)


class RecordsError(ValueError):
    """A run directory or record that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class RunDir:
    """A run directory's location and the experiment its manifest declares."""

    path: Path
    label: ExperimentLabel
    seeds: tuple[int, ...]
    conditions: tuple[
        str, ...
    ] = ()  # the conditions the run asked for (manifest config), if stated
    defining: Mapping[str, object] | None = None  # `defining_settings`; None: an older manifest


def defining_settings(manifest: dict) -> dict[str, object] | None:
    """What must agree for two runs to be one experiment, as flat `key: value` pairs; None for a
    manifest without a config (written by hand or by an older version: nothing to compare)."""
    config = manifest.get("config")
    if not isinstance(config, dict) or set(config) <= {"conditions"}:
        return None
    settings: dict[str, object] = {
        f"config.{k}": v for k, v in config.items() if k not in POOLABLE_CONFIG_KEYS
    }
    inputs = manifest.get("inputs") if isinstance(manifest.get("inputs"), dict) else {}
    for name in ("data", "sentences"):
        if isinstance(inputs.get(name), dict):
            settings[f"inputs.{name}.sha256"] = inputs[name].get("sha256")
    checkpoint = inputs.get("checkpoint") if isinstance(inputs.get("checkpoint"), dict) else {}
    for file, digest in sorted((checkpoint.get("files") or {}).items()):
        settings[f"inputs.checkpoint.files.{file}"] = digest
    if isinstance(checkpoint.get("gguf"), dict):
        settings["inputs.checkpoint.gguf.sha256"] = checkpoint["gguf"].get("sha256")
    return settings


def _differences(a: Mapping[str, object], b: Mapping[str, object]) -> list[str]:
    def show(value) -> str:
        text = json.dumps(value)
        return text if len(text) <= 40 else text[:37] + "..."

    return [
        f"{key} {show(a.get(key))} vs {show(b.get(key))}"
        for key in sorted(set(a) | set(b))
        if a.get(key) != b.get(key)
    ]


def read_run_dir(path: str | Path) -> RunDir:
    """Read and check a run directory's manifest.json (RecordsError naming the file if bad)."""
    path = Path(path)
    manifest = path / MANIFEST
    if not path.is_dir():
        raise RecordsError(f"{path}: not a directory (expected a run directory with manifest.json)")
    if not manifest.is_file():
        raise RecordsError(
            f"{manifest}: missing; is {path} a run directory written by `nudge run`?"
        )
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordsError(f"{manifest}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    experiment = data.get("experiment") if isinstance(data, dict) else None
    if not isinstance(experiment, dict):
        raise RecordsError(
            f"{manifest}: missing the object 'experiment' (model, task, decoding, seeds)"
        )
    for key in ("model", "task", "decoding"):
        if not isinstance(experiment.get(key), str):
            raise RecordsError(f"{manifest}: field experiment.{key} is missing or not a string")
    seeds = experiment.get("seeds", [0])
    if not (isinstance(seeds, list) and all(isinstance(x, int) for x in seeds)):
        raise RecordsError(f"{manifest}: field experiment.seeds must be a list of integers")
    continuation = experiment.get("continuation", "token")
    if not isinstance(continuation, str):
        raise RecordsError(f"{manifest}: field experiment.continuation must be a string")
    label = ExperimentLabel(
        experiment["model"], experiment["task"], experiment["decoding"], continuation
    )
    asked = (data.get("config") or {}).get("conditions") or ()
    if not (isinstance(asked, (list, tuple)) and all(isinstance(c, str) for c in asked)):
        raise RecordsError(f"{manifest}: field config.conditions must be a list of condition codes")
    return RunDir(path, label, tuple(sorted(seeds)), tuple(asked), defining_settings(data))


def json_lines(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSON-lines file (the run directory's one
    reader, splice/rundir/layout.py); RecordsError names the file and line of a line that is not a
    JSON object. The records and resolutions readers check their own fields on top."""
    return read_json_lines(path, error=RecordsError)


def iter_records(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(line number, record dict) for each non-blank line of a records.jsonl, checked for the
    fields the join needs; RecordsError names the file and line otherwise."""
    path = Path(path)
    if not path.is_file():
        raise RecordsError(f"{path}: missing (a run directory needs records.jsonl)")
    for number, record in json_lines(path):
        missing = [key for key in _REQUIRED if key not in record]
        if missing:
            raise RecordsError(f"{path}:{number}: missing field(s) {', '.join(missing)}")
        sample = record.get("sample")
        if sample is not None and (not isinstance(sample, int) or isinstance(sample, bool)):
            raise RecordsError(f"{path}:{number}: field sample must be an integer or absent")
        for key, kind in (("problem_id", str), ("condition", str), ("seed", int)):
            if not isinstance(record[key], kind) or isinstance(record[key], bool):
                raise RecordsError(f"{path}:{number}: field {key} must be a {kind.__name__}")
        if not isinstance(record["action"], dict) or "kind" not in record["action"]:
            raise RecordsError(f"{path}:{number}: field action must be an object with a 'kind'")
        try:
            action_code(record["action"]["kind"])
        except ValueError as exc:
            raise RecordsError(f"{path}:{number}: field action.kind: {exc}") from None
        grade = record.get("grade")
        if grade is not None and not (isinstance(grade, dict) and "correct" in grade):
            raise RecordsError(
                f"{path}:{number}: field grade must be null or an object with 'correct'"
            )
        yield number, record


def _slim(record: dict) -> dict:
    """Only the fields the join reads: a campaign's generated ids would not fit in memory."""
    grade = record.get("grade")
    return {
        "problem_id": record["problem_id"],
        "condition": record["condition"],
        "seed": record["seed"],
        "action": {"kind": record["action"]["kind"]},
        "boundary": record.get("boundary", 0),
        "grade": None if grade is None else {"correct": grade["correct"]},
        "sample": record.get("sample"),
    }


def _graded(record: dict | None) -> int:
    """1 / 0 for a record whose grade says right / wrong, -1 when absent or ungradeable."""
    if record is None or record.get("grade") is None:
        return -1
    return competence_code(record["grade"]["correct"])


def _closed(base_record: dict | None) -> bool:
    """False when the base record says its thinking never closed (boundary null): no splice."""
    return base_record is None or base_record.get("boundary", 0) is not None


def table_from_records(
    records: Sequence[dict], label: ExperimentLabel, conditions: Sequence[str] = ()
) -> ExperimentTable:
    """Join the records of one experiment into its ExperimentTable (rules in the module docstring).

    Records must be unique per (problem_id, condition, seed). `conditions` adds arms that were
    asked for even where no record holds them.
    """
    problems: dict[str, int] = {}
    by_key: dict[tuple[str, int], dict[str, dict]] = {}
    for record in records:
        if record.get("sample") is not None:  # self-consistency samples: signals, not arms
            continue
        problems.setdefault(record["problem_id"], len(problems))
        by_key.setdefault((record["problem_id"], int(record["seed"])), {})[record["condition"]] = (
            record
        )
    rows = sorted(by_key, key=lambda key: (problems[key[0]], key[1]))
    conditions = sorted(
        ({c for arms in by_key.values() for c in arms} | set(conditions))
        - {NO_TOOL_BASE, TOOL_BASE}
    )
    s, base = np.full(len(rows), -1, np.int8), np.full(len(rows), NONE, np.int8)
    arms = {c: np.full(len(rows), NONE, np.int8) for c in conditions}
    graded = [TOOL_BASE] + [code for code in BASE_CODES if code in conditions]
    correct = {name: np.full(len(rows), -1, np.int8) for name in graded}
    for i, key in enumerate(rows):
        found = by_key[key]
        nt = found.get(NO_TOOL_BASE)
        if nt is not None and action_code(nt["action"]["kind"]) != TRUNC:
            s[i] = _graded(nt)
        if TOOL_BASE in found:
            base[i] = action_code(found[TOOL_BASE]["action"]["kind"])
        for name in graded:
            record = found.get(name)
            if record is not None and action_code(record["action"]["kind"]) == SELF:
                correct[name][i] = _graded(record)
        for c in conditions:
            # A base has no parent; a code this version does not know is taken as a fork of B.
            parent = _PARENTS.get(c, TOOL_BASE)
            if c in found and (parent is None or _closed(found.get(parent))):
                arms[c][i] = action_code(found[c]["action"]["kind"])
    return ExperimentTable(
        s=s,
        base=base,
        arms=arms,
        correct=correct,
        cluster=np.array([problems[p] for p, _ in rows], dtype=np.int64),
        seed=np.array([seed for _, seed in rows], dtype=np.int64),
        problem_ids=tuple(p for p, _ in rows),
        label=label,
    )


def labelled_run_dirs(
    run_dirs: Sequence[str | Path], labels: Mapping[str | Path, str] | None = None
) -> list[RunDir]:
    """The run directories read (read_run_dir), each named in `labels` renamed "model (name)" so
    that it stays an experiment of its own. RecordsError for no directory or an unknown label."""
    if not run_dirs:
        raise RecordsError("no run directory given")
    named = {Path(d).resolve(): name for d, name in (labels or {}).items()}
    unknown = set(named) - {Path(d).resolve() for d in run_dirs}
    if unknown:
        raise RecordsError(f"--label {sorted(unknown)[0]}: not one of the run directories given")
    found = []
    for run_dir in map(read_run_dir, run_dirs):
        name = named.get(run_dir.path.resolve())
        if name is not None:
            run_dir = replace(
                run_dir,
                label=replace(run_dir.label, model=f"{run_dir.label.model} ({name})"),
            )
        found.append(run_dir)
    return found


def load_experiments(
    run_dirs: Sequence[str | Path], labels: Mapping[str | Path, str] | None = None
) -> list[ExperimentTable]:
    """One ExperimentTable per distinct (model, task, decoding) among the run directories, in
    order of first appearance. `labels` maps run directories to a name that keeps them as their
    own rows ("model (name)"). Raises RecordsError naming the file and line of any bad record,
    or the differing keys of runs that cannot be pooled."""
    groups: dict[tuple[str, str, str], tuple[ExperimentLabel, dict]] = {}
    asked: dict[tuple[str, str, str], set[str]] = {}
    levels: dict[tuple[str, str, str], set[str]] = {}
    first: dict[tuple[str, str, str], RunDir] = {}
    for run_dir in labelled_run_dirs(run_dirs, labels):
        _check_poolable(first.setdefault(run_dir.label.key, run_dir), run_dir)
        label, seen = groups.setdefault(run_dir.label.key, (run_dir.label, {}))
        asked.setdefault(run_dir.label.key, set()).update(run_dir.conditions)
        found_levels = levels.setdefault(run_dir.label.key, {label.continuation})
        path = run_dir.path / RECORDS
        for number, record in iter_records(path):
            if record["task"] != label.task:
                raise RecordsError(
                    f"{path}:{number}: task {record['task']!r} but the manifest says {label.task!r}"
                )
            if record["seed"] not in run_dir.seeds:
                seeds = list(run_dir.seeds)
                raise RecordsError(
                    f"{path}:{number}: seed {record['seed']} is not among the manifest's seeds {seeds}"
                )
            key = (record["problem_id"], record["condition"], record["seed"])
            if record.get("sample") is not None:  # one record per self-consistency sample
                key += (record["sample"],)
            if key in seen:
                first_at = seen[key][0]
                raise RecordsError(f"{path}:{number}: duplicate record {key} (first at {first_at})")
            seen[key] = (f"{path}:{number}", _slim(record))
            found_levels.add(_continuation(record, path, number))
    return [
        table_from_records(
            [r for _, r in seen.values()],
            replace(label, continuation=_least_faithful(levels[key])),
            sorted(asked[key]),
        )
        for key, (label, seen) in groups.items()
    ]


def _continuation(record: dict, path: Path, number: int) -> str:
    level = record.get("continuation", "token")  # absent: token-exact (a local run)
    if level not in CONTINUATION_LEVELS:
        raise RecordsError(
            f"{path}:{number}: field continuation {level!r} is not one of "
            f"{', '.join(CONTINUATION_LEVELS)}"
        )
    return level


def _least_faithful(levels: set[str]) -> str:
    """The experiment's level: its least faithful record's (a server that returned no ids for
    some requests makes a token-mode run text-level)."""
    return max(levels, key=CONTINUATION_LEVELS.index)


def _check_poolable(reference: RunDir, run_dir: RunDir) -> None:
    """Refuse to join two runs of one (model, task, decoding) made with different settings."""
    if run_dir is reference or reference.defining is None or run_dir.defining is None:
        return
    differences = _differences(reference.defining, run_dir.defining)
    if differences:
        raise RecordsError(
            f"{run_dir.path / 'manifest.json'}: same experiment name as {reference.path} but "
            f"other settings ({'; '.join(differences)}); pool only runs of one setting, or keep "
            f"them as separate rows: --label {reference.path}=NAME --label {run_dir.path}=NAME"
        )
