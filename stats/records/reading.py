"""Reading a run's JSON-lines files for the stats: records.jsonl and resolutions.jsonl as typed
records, each line checked by the run format's one reader (splice/rundir/records.py), whose
complaints arrive as RecordsError naming the file and the line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from nudgeability.splice.rundir.records import (
    Record,
    ResolutionRecord,
    read_records,
    read_resolutions,
)
from nudgeability.util.json_lines import read_json_lines

from .run_dirs import RecordsError


def json_lines(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSON-lines file (the run directory's one
    reader, util/json_lines.py); RecordsError names the file and line of a line that is not a
    JSON object."""
    return read_json_lines(path, error=RecordsError)


def iter_records(path: str | Path) -> Iterator[tuple[int, Record]]:
    """(line number, Record) for each non-blank line of a records.jsonl; RecordsError names the
    file and line of a line the run format's reader refuses."""
    return read_records(path, RecordsError)


def iter_resolutions(path: Path) -> Iterator[tuple[int, ResolutionRecord]]:
    """(line number, ResolutionRecord) of a resolutions.jsonl, each checked (as iter_records)."""
    return read_resolutions(path, RecordsError)
