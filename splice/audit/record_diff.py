"""Where two lines of a records file first differ: the record's key and the first differing field.

`nudge verify` uses it to name what changed when a records file disagrees with its part files or
a replayed unit disagrees with the stored one, e.g.
`record ('q1', 'B', 0): first differing field generated_ids[7]: stored 12, replayed 40`.
Fields are walked in the record schema's order (`records.Record`), so a changed token is named
before the text decoded from it. Two long strings are shown where they differ: the first
differing character's index, with `CONTEXT` characters of context on each side, e.g.
`text[char 1203]: stored …"so the answer is yes"…, replayed …"so the answer is no"…`.
"""

from __future__ import annotations

import json
from dataclasses import fields

from nudgeability.splice.rundir.records import Record, RecordKey
from nudgeability.util.json_errors import json_error

_ABSENT = object()  # a field one record has and the other lacks (not the same as null)
SHORT = 60  # a value written whole when its JSON is at most this long
CONTEXT = 20  # characters shown on each side of the first difference of two long strings


def first_difference(
    stored: str, replayed: str, labels: tuple[str, str] = ("stored", "replayed")
) -> str:
    """The record's key and its first differing field, in the record schema's field order;
    `labels` name the two sides in the message."""
    try:
        a, b = json.loads(stored), json.loads(replayed)
    except json.JSONDecodeError as exc:
        return f"a line is {json_error(exc)}"
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return "a line is not a JSON object"
    key = RecordKey(*(a.get(name) for name in RecordKey._fields))  # a damaged line may lack one
    order = [f.name for f in fields(Record)]
    for name in order + sorted((set(a) | set(b)) - set(order)):
        path = _first_path(a.get(name, _ABSENT), b.get(name, _ABSENT), name, labels)
        if path is not None:
            return f"record {key}: first differing field {path}"
    return f"record {key}: same values, other bytes (formatting)"


def _first_path(a: object, b: object, path: str, labels: tuple[str, str]) -> str | None:
    """Where two JSON values first differ, e.g. 'generated_ids[7]: stored 12, replayed 40'."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            found = _first_path(a.get(key, _ABSENT), b.get(key, _ABSENT), f"{path}.{key}", labels)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            found = _first_path(x, y, f"{path}[{i}]", labels)
            if found is not None:
                return found
        if len(a) != len(b):
            return f"{path}: {labels[0]} {len(a)} items, {labels[1]} {len(b)}"
        return None
    if (
        isinstance(a, str)
        and isinstance(b, str)
        and a != b
        and max(map(_json_length, (a, b))) > SHORT
    ):
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return f"{path}[char {at}]: {labels[0]} {_around(a, at)}, {labels[1]} {_around(b, at)}"
    if a != b or type(a) is not type(b):
        return f"{path}: {labels[0]} {_short(a)}, {labels[1]} {_short(b)}"
    return None


def _json_length(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False))


def _around(text: str, at: int) -> str:
    """The characters of `text` around index `at`, as JSON, with … where text was left out."""
    start, end = max(at - CONTEXT, 0), min(at + CONTEXT + 1, len(text))
    window = json.dumps(text[start:end], ensure_ascii=False)
    return f"{'…' if start else ''}{window}{'…' if end < len(text) else ''}"


def _short(value: object) -> str:
    if value is _ABSENT:
        return "absent"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHORT else text[: SHORT - 3] + "..."
