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


def test_long_texts_are_shown_where_they_differ_with_context():
    """Not two 57-character heads that look the same (issue 25, case 6): the first differing
    character, 20 characters each side, … where text was left out."""
    stored, replayed = "x" * 100 + "cat" + "y" * 100, "x" * 100 + "cut" + "y" * 100
    message = first_difference(line(text=stored), line(text=replayed))
    window = "x" * 19 + "c{}t" + "y" * 19
    assert message == (
        "record ('q1', 'B', 0): first differing field text[char 101]: "
        f'stored …"{window.format("a")}"…, replayed …"{window.format("u")}"…'
    )


def test_a_long_text_cut_short_is_shown_where_the_shorter_one_ends():
    stored = "the model answers: " + "yes " * 20  # 19 + 80 characters
    message = first_difference(line(text=stored), line(text=stored[:30]))
    # characters 10..50 of the stored text (from "answers"), 10..29 of the replayed, its end
    assert message == (
        "record ('q1', 'B', 0): first differing field text[char 30]: "
        'stored …"answers: yes yes yes yes yes yes yes yes "…, replayed …"answers: yes yes yes"'
    )
