"""The run directory's layout: its file names and the one JSON-lines reader.

Standard library only, so that every layer (the runner, the audit, `nudge merge` and the stats)
imports the names from here instead of spelling them again. What each file holds is described in
splice/rundir/README.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from nudgeability.models.json_errors import json_error  # standard library only

MANIFEST = "manifest.json"
RECORDS = "records.jsonl"
RESOLUTIONS = "resolutions.jsonl"
TIMINGS = "timings.jsonl"
PARTS = "parts"
DAMAGED = "damaged"
SIGNALS_DIR = "signals"  # the side files stats reads beside the records (splice/run/signals.py)
LOCK = ".lock"
# the sha256 of each part written since the seal (all of them, in a run not yet sealed)
PART_HASHES = "part_hashes.jsonl"
PART_SUFFIX = ".jsonl"  # parts/<unit>.jsonl: a finished unit's records
SIDE_SUFFIX = ".npy"  # signals/<unit>.npy: a B unit's hidden states


def part_file(unit_name: str) -> str:
    """Where a run directory stores a finished unit's records (relative to the directory)."""
    return f"{PARTS}/{unit_name}{PART_SUFFIX}"


def side_file(unit_name: str) -> str:
    """Where a run directory stores a B unit's hidden states (relative to the directory)."""
    return f"{SIGNALS_DIR}/{unit_name}{SIDE_SUFFIX}"


class JsonLinesError(ValueError):
    """A JSON-lines file with a line that cannot be read; `path`, `line` and `reason` say where
    and why, `kind` what is wrong ("utf8", "json" or "object"), and the message is
    `PATH:LINE: REASON`."""

    def __init__(self, path: str | Path, line: int, reason: str, kind: str = "json"):
        self.path, self.line, self.reason, self.kind = str(path), line, reason, kind
        super().__init__(f"{path}:{line}: {reason}")


class JsonLine(NamedTuple):
    """One line of a JSON-lines file: its number, its text as stored (without the newline) and
    the JSON value it holds."""

    number: int
    text: str
    value: object


def split_lines(text: str) -> list[str]:
    """Lines of a JSONL text split at "\\n" only: JSON written with ensure_ascii=False keeps
    U+2028, U+0085 and kin unescaped, which `str.splitlines` would wrongly split at."""
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def json_lines(
    path: str | Path,
    error: Callable[[str], Exception] | type[JsonLinesError] = JsonLinesError,
    *,
    objects: bool = True,
    skip_blank: bool = True,
) -> Iterator[JsonLine]:
    """Every line of a JSON-lines file, split at "\\n" only and decoded one by one.

    A line that is not UTF-8, not JSON or (with `objects`) not a JSON object raises `error`: the
    caller's own type, built from the one-line message `PATH:LINE: REASON` (so that its users
    catch what they already catch), or `JsonLinesError` with the parts apart. Blank lines are
    skipped unless `skip_blank` is false (then they fail as invalid JSON). Readers check their own
    fields on top.
    """
    path = Path(path)

    def fail(number: int, reason: str, kind: str) -> Exception:
        if isinstance(error, type) and issubclass(error, JsonLinesError):
            return error(path, number, reason, kind)
        return error(f"{path}:{number}: {reason}")

    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise fail(number, "not valid UTF-8 (a damaged line)", "utf8") from None
            text = text[:-1] if text.endswith("\n") else text
            if skip_blank and not text.strip():
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                reason = json_error(exc)
                raise fail(number, reason, "json") from None
            if objects and not isinstance(value, dict):
                raise fail(number, f"expected a JSON object, got {type(value).__name__}", "object")
            yield JsonLine(number, text, value)


def read_json_lines(
    path: Path, error: Callable[[str], Exception] = JsonLinesError
) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSON-lines file (`json_lines`)."""
    for line in json_lines(path, error):
        yield line.number, line.value
