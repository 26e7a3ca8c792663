"""The Action value: kinds and reasons are checked, and it converts to the record schema."""

from __future__ import annotations

import json

import pytest

from nudgeability.models.families import Action
from nudgeability.splice.rundir.records import GradeRecord, Record


def test_a_record_stores_the_action_field_for_field_and_reads_it_back():
    action = Action("TOOL", tool_name="retrieve", arguments={"query": "Emma"})
    record = Record(
        "p", "musique", "B", None, 0, 3, "0" * 64, None, 1, [1, 2], "ab", "eos", action, None
    )
    line = json.loads(record.to_json())
    assert line["action"] == {
        "kind": "TOOL",
        "answer": None,
        "tool_name": "retrieve",
        "arguments": {"query": "Emma"},
        "reason": None,
        "narration": None,
    }
    assert Record.from_dict(line).action == action
    # A record written before `narration` existed reads back too.
    old = line | {"action": {k: v for k, v in line["action"].items() if k != "narration"}}
    assert Record.from_dict(old).action == action
    assert Record.from_dict(line | {"grade": {"em": 1.0, "f1": 1.0, "correct": True}}).grade == (
        GradeRecord(1.0, 1.0, True)
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "ANSWER"},
        {"kind": "OTHER"},  # OTHER needs a reason
        {"kind": "OTHER", "reason": "budget_in_answer"},  # a TRUNC reason
        {"kind": "TRUNC", "reason": "undeclared_tool"},  # an OTHER reason
        {"kind": "SELF", "answer": "x", "reason": "empty_commitment"},
    ],
)
def test_inconsistent_kind_and_reason_are_rejected(kwargs):
    with pytest.raises(ValueError, match="Action"):
        Action(**kwargs)
