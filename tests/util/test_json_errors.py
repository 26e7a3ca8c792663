"""util/json_errors.py: every JSON syntax error reads `not valid JSON (WHAT at column C)`,
never cut ("starting at)") nor doubled ("at at"). The expected lines are written by hand from
the texts: the column is where a reader finds the fault (1-based)."""

from __future__ import annotations

import json

import pytest

from nudgeability.util.json_errors import json_error


def _error(text: str) -> json.JSONDecodeError:
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads(text)
    return caught.value


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"a": "cut', "not valid JSON (Unterminated string starting at column 7)"),
        ('{"a": 1', "not valid JSON (Expecting ',' delimiter at column 8)"),
        ('{"a": }', "not valid JSON (Expecting value at column 7)"),
        ('{"a": "x\ty"}', "not valid JSON (Invalid control character at column 9)"),
        ('{"a": 1} x', "not valid JSON (Extra data at column 10)"),
    ],
)
def test_each_kind_of_error_reads_once_with_its_place(text, expected):
    assert json_error(_error(text)) == expected


def test_the_line_is_given_where_the_message_has_none():
    text = '{\n  "config": {\n    "model": "cut\n'
    assert json_error(_error(text), line=True) == (
        "not valid JSON (Invalid control character at line 3, column 18)"
    )
