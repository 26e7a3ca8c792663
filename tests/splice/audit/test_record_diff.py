"""`first_difference` names the first differing field of two record lines, in the record schema's
field order (hand-written records; expected messages written out by hand)."""

from __future__ import annotations

import json

from nudgeability.splice.audit.record_diff import first_difference

BASE = {
    "problem_id": "q1",
    "task": "strategyqa",
    "condition": "B",
    "seed": 0,
    "generated_ids": [5, 6, 7],
    "text": "abc",
    "action": {"kind": "SELF", "answer": "yes"},
}


def line(**changes) -> str:
    return json.dumps({**BASE, **changes}, sort_keys=True)


def test_a_changed_token_is_named_before_the_text_decoded_from_it():
    assert first_difference(line(), line(generated_ids=[5, 9, 7], text="a?c")) == (
        "record ('q1', 'B', 0): first differing field generated_ids[1]: stored 6, replayed 9"
    )


def test_nested_fields_lengths_and_absent_versus_null():
    assert first_difference(line(), line(action={"kind": "SELF", "answer": "no"})) == (
        "record ('q1', 'B', 0): first differing field action.answer: stored \"yes\", replayed \"no\""
    )
    assert first_difference(line(), line(generated_ids=[5, 6])) == (
        "record ('q1', 'B', 0): first differing field generated_ids: stored 3 items, replayed 2"
    )
    newer = line(action={"kind": "SELF", "answer": "yes", "narration": None})
    assert first_difference(line(), newer, ("parts", "records.jsonl")) == (
        "record ('q1', 'B', 0): first differing field action.narration: parts absent, "
        "records.jsonl null"
    )


def test_same_values_in_other_bytes_and_broken_lines():
    assert first_difference(line(), json.dumps(BASE, sort_keys=True, indent=1)) == (
        "record ('q1', 'B', 0): same values, other bytes (formatting)"
    )
    assert first_difference(line(), line()[:-3]).startswith("a line is not valid JSON")
