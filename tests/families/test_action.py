"""The Action value: kinds and reasons are checked, and it converts to the record schema."""

from __future__ import annotations

import pytest

from nudgeability.models.families import Action
from nudgeability.splice.records import ACTION_KINDS, ActionRecord


def test_action_converts_to_an_action_record_field_for_field():
    action = Action("TOOL", tool_name="retrieve", arguments={"query": "Emma"})
    record = ActionRecord(**action.to_record())
    assert record == ActionRecord(kind="TOOL", tool_name="retrieve", arguments={"query": "Emma"})


def test_action_kinds_match_the_record_schema():
    from nudgeability.models.families.action import ACTION_KINDS as FAMILY_KINDS

    assert FAMILY_KINDS == ACTION_KINDS


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
