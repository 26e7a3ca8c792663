"""The run directory's layout module (splice/rundir/layout.py): the record key and the one
JSON-lines reader, on hand-written files and hand-written expected values."""

from __future__ import annotations

import pytest

from nudgeability.splice.rundir.layout import (
    JsonLinesError,
    json_lines,
    read_json_lines,
    split_lines,
)
from nudgeability.splice.rundir.records import RecordKey


def test_the_record_key_of_a_record_and_of_a_self_consistency_sample():
    assert RecordKey.of({"problem_id": "q1", "condition": "B", "seed": 0, "x": 1}) == (
        "q1",
        "B",
        0,
        None,
    )
    sample = RecordKey.of({"problem_id": "q1", "condition": "consistency", "seed": 0, "sample": 3})
    assert sample == ("q1", "consistency", 0, 3)
    assert str(RecordKey("q1", "B", 0)) == "('q1', 'B', 0)"  # as messages have always read
    assert str(sample) == "('q1', 'consistency', 0, 3)"
    assert RecordKey("q1", "B", 0).compact == ("q1", "B", 0)


class _CallersError(ValueError):
    pass


def test_lines_are_split_at_newlines_only_and_kept_as_stored(tmp_path):
    path = tmp_path / "x.jsonl"
    line = '{"text": "a\u2028b\u0085c",  "n": 1}'  # kept unescaped, as ensure_ascii=False writes
    path.write_bytes((line + "\n\n" + '{"n": 2}' + "\n").encode("utf-8"))
    lines = list(json_lines(path))
    assert [(x.number, x.text) for x in lines] == [(1, line), (3, '{"n": 2}')]
    assert lines[0].value == {"text": "a\u2028b\u0085c", "n": 1}
    assert list(read_json_lines(path)) == [(1, lines[0].value), (3, {"n": 2})]
    assert split_lines(path.read_text(encoding="utf-8")) == [line, "", '{"n": 2}']


@pytest.mark.parametrize(
    "content,reason",
    [
        (b'{"n": 1}\n{"n": \n', "not valid JSON (Expecting value at column 7)"),
        (b'{"n": 1}\n[1, 2]\n', "expected a JSON object, got list"),
        (b'{"n": 1}\n{"t": "\xff"}\n', "not valid UTF-8 (a damaged line)"),
    ],
)
def test_a_bad_line_is_named_by_file_line_and_reason(tmp_path, content, reason):
    path = tmp_path / "x.jsonl"
    path.write_bytes(content)
    with pytest.raises(JsonLinesError) as error:
        list(json_lines(path))
    assert (error.value.path, error.value.line, error.value.reason) == (str(path), 2, reason)
    assert str(error.value) == f"{path}:2: {reason}"
    with pytest.raises(_CallersError) as theirs:  # the caller's own type, with the same message
        list(read_json_lines(path, _CallersError))
    assert str(theirs.value) == f"{path}:2: {reason}"


def test_blank_lines_fail_when_asked_and_non_objects_pass_when_allowed(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('[1]\n\n"s"\n', encoding="utf-8")
    assert [x.value for x in json_lines(path, objects=False)] == [[1], "s"]
    with pytest.raises(JsonLinesError, match=r":2: not valid JSON \(Expecting value"):
        list(json_lines(path, objects=False, skip_blank=False))
