"""Reading a run's JSON-lines files: records.jsonl and resolutions.jsonl, checked line by line.

Every reader of the stats goes through here, on top of the run directory's one JSON-lines reader
(splice/rundir/layout.py): a line that is not a JSON object, or lacks a field the joins read,
raises RecordsError naming the file and the line. Records follow the schema of
nudgeability.splice.experiment.records.Record, resolutions its ResolutionRecord.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from nudgeability.splice.experiment.records import CONTINUATION_LEVELS
from nudgeability.splice.rundir.layout import RECORDS, RecordKey
from nudgeability.util.json_lines import read_json_lines

from ..actions import action_code
from .run_dirs import RecordsError

_REQUIRED = ("problem_id", "task", "condition", "seed", "action")
_RESOLUTION_REQUIRED = ("problem_id", "condition", "seed", "tool_name", "executed", "action")


def json_lines(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSON-lines file (the run directory's one
    reader, splice/rundir/layout.py); RecordsError names the file and line of a line that is not a
    JSON object. The records and resolutions readers check their own fields on top."""
    return read_json_lines(path, error=RecordsError)


def record_key(record: dict) -> tuple:
    """What names a record in a run, as a plain tuple (the form error messages show):
    (problem_id, condition, seed), with the sample index of a self-consistency sample appended."""
    key = RecordKey.of(record)
    named = (key.problem_id, key.condition, key.seed)
    return named if key.sample is None else (*named, key.sample)


def iter_records(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(line number, record dict) for each non-blank line of a records.jsonl, checked for the
    fields the join needs; RecordsError names the file and line otherwise."""
    path = Path(path)
    if not path.is_file():
        raise RecordsError(f"{path}: missing (a run directory needs {RECORDS})")
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


def iter_resolutions(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, resolution dict) of a resolutions.jsonl, checked for the fields the
    delegation join needs."""
    for number, record in json_lines(path):
        missing = [k for k in _RESOLUTION_REQUIRED if k not in record]
        if missing:
            raise RecordsError(f"{path}:{number}: missing field(s) {', '.join(missing)}")
        yield number, record


def continuation_of(record: dict, path: Path, number: int) -> str:
    """The continuation level of a record (token when absent: a local run); RecordsError naming
    the line for a level that is not one of nudgeability.splice.experiment.records.CONTINUATION_LEVELS."""
    level = record.get("continuation", "token")
    if level not in CONTINUATION_LEVELS:
        raise RecordsError(
            f"{path}:{number}: field continuation {level!r} is not one of "
            f"{', '.join(CONTINUATION_LEVELS)}"
        )
    return level
