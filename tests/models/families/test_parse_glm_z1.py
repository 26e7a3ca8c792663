"""GLM-Z1: hand-written completions after the cut (multi-token `</think>` in the tiny vocabulary),
each with the Action it must parse to."""

from __future__ import annotations

import pytest
from helpers.parse_cases import ARGS, DOUBT, FIELDS, TOOL_CALL, R, case

from nudgeability.models.families import Action

CALL = 'retrieve\n{"query": "author of Emma"}'

CASES = [
    case(
        "clean_self",
        "</think>\nJane Austen wrote Emma.<|user|>",
        "stop_token",
        None,
        Action("SELF", answer="Jane Austen wrote Emma."),
    ),
    case(
        "self_after_assistant_token",
        "</think><|assistant|>\nJane Austen.<|user|>",
        "stop_token",
        None,
        Action("SELF", answer="Jane Austen."),
    ),
    case("clean_tool", "</think>\n" + CALL + "<|observation|>", "stop_token", None, TOOL_CALL),
    case(
        "tool_after_assistant_token",
        '</think><|assistant|>retrieve\n{"query": "author of Emma"}<|observation|>',
        "stop_token",
        None,
        TOOL_CALL,
    ),
    case(
        "tool_assistant_token_on_own_line",
        '</think>\n<|assistant|>\nretrieve\n{"query": "author of Emma"}<|observation|>',
        "stop_token",
        None,
        TOOL_CALL,
    ),
    case(
        "tool_extra_whitespace",
        '</think>\n\n  retrieve  \n   {"query":"author of Emma"}  \n<|observation|>',
        "stop_token",
        None,
        TOOL_CALL,
    ),
    case(
        "tool_nested_braces_in_arguments",
        '</think>\nretrieve\n{"query": "author of Emma", "filter": {"year": 1815}}',
        "eos",
        None,
        Action(
            "TOOL", tool_name=R, arguments={"query": "author of Emma", "filter": {"year": 1815}}
        ),
    ),
    case(
        "other_undeclared_tool",
        '</think>\nsearch\n{"query": "Emma"}<|observation|>',
        "stop_token",
        None,
        Action("OTHER", tool_name="search", reason="undeclared_tool"),
    ),
    case(
        "other_unparsable_json",
        '</think>\nretrieve\n{"query": Emma}<|observation|>',
        "stop_token",
        None,
        Action("OTHER", tool_name=R, reason="unparsable_arguments"),
    ),
    case(
        "other_unclosed_json_at_end_of_turn",
        '</think>\nretrieve\n{"query": "Emma"<|observation|>',
        "stop_token",
        None,
        Action("OTHER", tool_name=R, reason="unparsable_arguments"),
    ),
    case(
        "tool_text_beside_a_call_is_narration_without_an_answer_format",
        "</think>\nThe author is Jane Austen.\n" + CALL,
        "stop_token",
        None,
        Action("TOOL", tool_name=R, arguments=ARGS, narration="The author is Jane Austen."),
    ),
    case(
        "other_empty_commitment",
        "</think>\n<|user|>",
        "stop_token",
        None,
        Action("OTHER", reason="empty_commitment"),
    ),
    case(
        "other_think_never_closed",
        "Emma was written by<|endoftext|>",
        "eos",
        None,
        Action("OTHER", reason="think_never_closed"),
    ),
    case(
        "trunc_in_thinking",
        "Emma was written by someone whose",
        "length",
        None,
        Action("TRUNC", reason="budget_in_thinking"),
    ),
    case(
        "trunc_in_tool_call",
        '</think>\nretrieve\n{"query": "auth',
        "length",
        None,
        Action("TRUNC", reason="budget_in_tool_call"),
    ),
    case(
        "trunc_in_answer",
        "</think>\nJane",
        "length",
        None,
        Action("TRUNC", reason="budget_in_answer"),
    ),
    case(
        "self_is_not_a_call_when_no_json_follows",
        "</think>\nretrieve\nthe paragraph yourself<|user|>",
        "stop_token",
        None,
        Action("SELF", answer="retrieve\nthe paragraph yourself"),
    ),
    case(
        "open_arm_reasons_on_then_calls",
        "So I should look it up.</think>\n" + CALL,
        "stop_token",
        (DOUBT, False),
        TOOL_CALL,
    ),
    case(
        "sealed_arm_think_reopened_then_closed",
        "<think>Let me reconsider.</think>\nJane Austen.<|user|>",
        "stop_token",
        (DOUBT, True),
        Action("SELF", answer="Jane Austen."),
    ),
    case(
        "sealed_arm_think_reopened_budget_ends",
        "<think>Let me reconsider whether",
        "length",
        (DOUBT, True),
        Action("TRUNC", reason="budget_in_thinking"),
    ),
    case(
        "two_closes_reads_after_the_last",
        "</think>\nPerhaps Rome.</think>\n" + CALL,
        "stop_token",
        None,
        TOOL_CALL,
    ),
]


@pytest.mark.parametrize(FIELDS, CASES)
def test_glm_z1_completion_parses_to_expected_action(parse_case, text, finish, prefix, expected):
    assert parse_case("glm_z1", text, finish, prefix) == expected


def test_glm_z1_close_marker_is_multi_token_in_the_tiny_vocabulary(make_family):
    assert len(make_family("glm_z1").think_close_ids) > 1
