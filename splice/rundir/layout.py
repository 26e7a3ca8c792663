"""The run directory's layout: its file names, the record key and the one JSON-lines reader.

Standard library only, so that every layer (the runner, the audit, `nudge merge` and the stats)
imports the names from here instead of spelling them again. What each file holds is described in
splice/rundir/README.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

MANIFEST = "manifest.json"
RECORDS = "records.jsonl"
RESOLUTIONS = "resolutions.jsonl"
TIMINGS = "timings.jsonl"
PARTS = "parts"
DAMAGED = "damaged"
SIGNALS_DIR = "signals"  # the side files stats reads beside the records (splice/signals.py)
LOCK = ".lock"


class RecordKey(NamedTuple):
    """What names one record in a run: a problem under one condition with one sampling seed."""

    problem_id: str
    condition: str
    seed: int

    @classmethod
    def of(cls, record: Mapping) -> RecordKey:
        """The key of a record (or a resolution) read from a JSON line."""
        return cls(record["problem_id"], record["condition"], record["seed"])


class JsonLinesError(ValueError):
    """A JSON-lines file with a line that is not a JSON object; the message names file and line."""


def split_lines(text: str) -> list[str]:
    """Lines of a JSONL text split at "\\n" only: JSON written with ensure_ascii=False keeps
    U+2028, U+0085 and kin unescaped, which `str.splitlines` would wrongly split at."""
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def read_json_lines(
    path: Path, error: type[ValueError] = JsonLinesError
) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSON-lines file.

    A line that is not a JSON object raises `error` (the caller's own type, so that its users
    catch what they already catch) with a message naming the file and the line. Readers check
    their own fields on top.
    """
    path = Path(path)
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise error(
                    f"{path}:{number}: not valid JSON ({exc.msg}, column {exc.colno})"
                ) from None
            if not isinstance(record, dict):
                raise error(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
            yield number, record
