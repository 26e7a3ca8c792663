"""Reading official data files record by record, with the line each record starts on.

Both readers report a broken file as a one-line `DataFileError` naming the file and line, so a
truncated download says where it was cut instead of raising a bare `JSONDecodeError`. JSON Lines
are read by the project's one JSON-lines reader (util/json_lines.py `json_lines`).
"""

from __future__ import annotations

import json
import os
import re

from nudgeability.splice.tasks.problem import DataFileError
from nudgeability.util.json_errors import json_error
from nudgeability.util.json_lines import JsonLinesError, json_lines

_WHITESPACE = re.compile(r"\s*")


def _read_text(path: str | os.PathLike) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except UnicodeDecodeError as exc:
        raise DataFileError(
            path, f"not UTF-8 text (byte {exc.start}); pass the official file"
        ) from None


# What a file of the other layout looks like, said when a reader meets it (a common mix-up:
# --task musique with strategyqa_train.json, or the reverse).
ARRAY_NOT_LINES = (
    "the file is one JSON array, not JSON Lines (one object per line); it looks like "
    "StrategyQA's strategyqa_train.json: pass --task strategyqa, or the task's own file"
)
LINES_NOT_ARRAY = (
    "the file is JSON Lines (one object per line), not one JSON array; it looks like "
    "MuSiQue's musique_ans_v1.0_*.jsonl: pass --task musique, or the task's own file"
)


def read_jsonl(path: str | os.PathLike) -> list[tuple[int, object]]:
    """Parse a JSON Lines file into `(line_number, value)` pairs; blank lines are skipped."""
    first = _first_nonblank_line(path)
    if first.lstrip().startswith("[") and not _first_line_is_json(first):
        raise DataFileError(path, ARRAY_NOT_LINES)
    try:  # split at "\n" only, so a string holding U+2028 and kin stays one record
        return [(line.number, line.value) for line in json_lines(path, objects=False)]
    except JsonLinesError as exc:
        if exc.kind == "utf8":
            raise DataFileError(
                path, "not UTF-8 text; pass the official file", line=exc.line
            ) from None
        raise DataFileError(
            path, f"{exc.reason}; the line may be truncated: fetch the file again", line=exc.line
        ) from None


def _first_nonblank_line(path: str | os.PathLike) -> str:
    """The file's first line that is not blank (decoded loosely: this only tells the layouts apart)."""
    with open(path, "rb") as handle:
        for raw in handle:
            if raw.strip():
                return raw.decode("utf-8", errors="replace")
    return ""


def read_json_array(path: str | os.PathLike) -> list[tuple[int, object]]:
    """Parse a file holding one JSON array into `(line_number, element)` pairs.

    The line is where each element starts. The array is decoded element by element so that an
    error names the line it occurs on.
    """
    text = _read_text(path)
    decoder = json.JSONDecoder()
    counted_to, line = 0, 1

    def line_at(position: int) -> int:
        nonlocal counted_to, line
        line += text.count("\n", counted_to, position)
        counted_to = position
        return line

    def fail(position: int, message: str) -> DataFileError:
        newlines = text.count("\n", 0, position)
        return DataFileError(path, message, line=newlines + 1)

    position = _WHITESPACE.match(text, 0).end()
    if text[position : position + 1] == "{" and _first_line_is_json(text, dict):
        raise fail(position, LINES_NOT_ARRAY)
    if text[position : position + 1] != "[":
        raise fail(position, "expected one JSON array of records ('[' ...)")
    position = _WHITESPACE.match(text, position + 1).end()
    elements: list[tuple[int, object]] = []
    if text[position : position + 1] == "]":
        return elements
    while True:
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise fail(
                exc.pos,
                f"{json_error(exc)}; the file may be truncated: fetch it again",
            ) from None
        elements.append((line_at(position), value))
        position = _WHITESPACE.match(text, end).end()
        separator = text[position : position + 1]
        if separator == "]":
            break
        if separator != ",":
            reason = "the file ends inside the array" if not separator else f"found {separator!r}"
            raise fail(
                position,
                f"expected ',' or ']' after a record, {reason}; the file may be "
                "truncated: fetch it again",
            )
        position = _WHITESPACE.match(text, position + 1).end()
    trailing = _WHITESPACE.match(text, position + 1).end()
    if trailing < len(text):
        raise fail(trailing, "unexpected text after the closing ']'")
    return elements


def _first_line_is_json(text: str, kind: type = object) -> bool:
    """Whether the first non-blank line is a whole JSON value of `kind` (the JSON Lines layout)."""
    first = next((line for line in text.split("\n") if line.strip()), "")
    try:
        return isinstance(json.loads(first), kind)
    except json.JSONDecodeError:
        return False


def require(
    record: object,
    field: str,
    kind: type | tuple[type, ...],
    expected: str,
    path: str | os.PathLike,
    line: int,
):
    """Return `record[field]`, or raise `DataFileError` naming the field, file and line.

    `expected` says in words what the field must be ("a string", "true or false").
    """
    if not isinstance(record, dict):
        raise DataFileError(
            path, f"expected a JSON object, found {type(record).__name__}", line=line
        )
    if field not in record:
        raise DataFileError(
            path, f"record has no '{field}' field; it must be {expected}", line=line, field=field
        )
    value = record[field]
    # bool is a subclass of int: reject it where a number or string is asked for.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise DataFileError(
            path,
            f"field '{field}' must be {expected}, found {json.dumps(value)[:40]}",
            line=line,
            field=field,
        )
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)
