"""Qwen3: hand-written completions after the cut, each with the Action it must parse to."""

from __future__ import annotations

import pytest
from helpers.parse_cases import ARGS, CONFIDENT, FIELDS, TOOL_CALL, R, case

from nudgeability.models.families import Action

CALL = '<tool_call>\n{"name": "retrieve", "arguments": {"query": "author of Emma"}}\n</tool_call>'

CASES = [
    case(
        "clean_self",
        "</think>\n\nJane Austen wrote Emma.<|im_end|>",
        "stop_token",
        None,
        Action("SELF", answer="Jane Austen wrote Emma."),
    ),
    case("clean_tool", "</think>\n\n" + CALL, "stop_token", None, TOOL_CALL),
    case(
        "tool_no_whitespace",
        '</think><tool_call>{"name":"retrieve","arguments":{"query":"author of Emma"}}</tool_call>',
        "stop_token",
        None,
        TOOL_CALL,
    ),
    case(
        "tool_extra_whitespace_and_key_order",
        '</think>\n\n\n  <tool_call>  \n\n { "arguments" : { "query" : "author of Emma" } ,\n "name" : "retrieve" }  \n</tool_call>\n<|im_end|>',
        "stop_token",
        None,
        TOOL_CALL,
    ),
    case(
        "tool_arguments_as_json_string",
        '</think>\n\n<tool_call>\n{"name": "retrieve", "arguments": "{\\"query\\": \\"author of Emma\\"}"}\n</tool_call>',
        "stop_token",
        None,
        TOOL_CALL,
    ),
    case(
        "tool_close_tag_eaten_by_stop_string",
        '</think>\n\n<tool_call>\n{"name": "retrieve", "arguments": {"query": "author of Emma"}}\n',
        "stop_string",
        None,
        TOOL_CALL,
    ),
    case(
        "other_undeclared_tool",
        '</think>\n\n<tool_call>\n{"name": "search", "arguments": {"query": "Emma"}}\n</tool_call>',
        "stop_token",
        None,
        Action("OTHER", tool_name="search", reason="undeclared_tool"),
    ),
    case(
        "other_unparsable_json",
        '</think>\n\n<tool_call>\n{"name": "retrieve", "arguments": {"query": "Emma"}\n</tool_call>',
        "stop_token",
        None,
        Action("OTHER", tool_name=R, reason="unparsable_arguments"),
    ),
    case(
        "other_arguments_not_an_object",
        '</think>\n\n<tool_call>\n{"name": "retrieve", "arguments": "Emma"}\n</tool_call>',
        "stop_token",
        None,
        Action("OTHER", tool_name=R, reason="unparsable_arguments"),
    ),
    case(
        "other_call_without_name",
        '</think>\n\n<tool_call>\n{"arguments": {"query": "Emma"}}\n</tool_call>',
        "stop_token",
        None,
        Action("OTHER", reason="unparsable_arguments"),
    ),
    case(
        "tool_text_beside_a_call_is_narration_without_an_answer_format",
        "</think>\n\nI think it is Jane Austen.\n" + CALL,
        "stop_token",
        None,
        Action("TOOL", tool_name=R, arguments=ARGS, narration="I think it is Jane Austen."),
    ),
    case(
        "other_empty_commitment",
        "</think>\n\n<|im_end|>",
        "stop_token",
        None,
        Action("OTHER", reason="empty_commitment"),
    ),
    case(
        "other_think_never_closed",
        "Let me think about Emma.<|im_end|>",
        "eos",
        None,
        Action("OTHER", reason="think_never_closed"),
    ),
    case(
        "trunc_in_thinking",
        "Let me think about Emma and who",
        "length",
        None,
        Action("TRUNC", reason="budget_in_thinking"),
    ),
    case(
        "trunc_in_answer",
        "</think>\n\nJane Aus",
        "length",
        None,
        Action("TRUNC", reason="budget_in_answer"),
    ),
    case(
        "trunc_in_tool_call",
        '</think>\n\n<tool_call>\n{"name": "retrieve", "argu',
        "length",
        None,
        Action("TRUNC", reason="budget_in_tool_call"),
    ),
    case(
        "trunc_right_after_close",
        "</think>\n\n",
        "length",
        None,
        Action("TRUNC", reason="budget_after_think"),
    ),
    case(
        "self_ended_by_marker_despite_length",
        "</think>\n\nJane Austen.<|im_end|>\n<|im_start|>user\nmore",
        "length",
        None,
        Action("SELF", answer="Jane Austen."),
    ),
    case(
        "call_with_no_tools_declared_is_undeclared",
        "</think>\n\n" + CALL,
        "stop_token",
        "NO_TOOLS",
        Action("OTHER", tool_name=R, reason="undeclared_tool"),
    ),
    case(
        "open_arm_reasons_on_then_closes",
        "So I can answer directly.\n</think>\n\nJane Austen.<|im_end|>",
        "stop_token",
        (CONFIDENT, False),
        Action("SELF", answer="Jane Austen."),
    ),
    case(
        "sealed_arm_think_reopened_then_closed",
        "\n\n<think>\nWait, let me check with the tool.\n</think>\n\n" + CALL,
        "stop_token",
        (CONFIDENT, True),
        TOOL_CALL,
    ),
    case(
        "sealed_arm_think_reopened_budget_ends",
        "\n\n<think>\nWait, let me",
        "length",
        (CONFIDENT, True),
        Action("TRUNC", reason="budget_in_thinking"),
    ),
    case(
        "sealed_arm_think_reopened_turn_ends",
        "\n\n<think>\nWait.<|im_end|>",
        "stop_token",
        (CONFIDENT, True),
        Action("OTHER", reason="think_reopened"),
    ),
    case(
        "two_closes_reads_after_the_last",
        "</think>\n\nMaybe it is Rome.\n</think>\n\nJane Austen.<|im_end|>",
        "eos",
        None,
        Action("SELF", answer="Jane Austen."),
    ),
]


@pytest.mark.parametrize(FIELDS, CASES)
def test_qwen3_completion_parses_to_expected_action(parse_case, text, finish, prefix, expected):
    if prefix == "NO_TOOLS":
        assert parse_case("qwen3", text, finish, tools=None) == expected
    else:
        assert parse_case("qwen3", text, finish, prefix) == expected


def test_qwen3_table_covers_every_kind_and_reason():
    kinds = {c.values[-1].kind for c in CASES}
    reasons = {c.values[-1].reason for c in CASES if c.values[-1].reason}
    assert kinds == {"SELF", "TOOL", "OTHER", "TRUNC"}
    assert {
        "undeclared_tool",
        "unparsable_arguments",
        "empty_commitment",
    } <= reasons  # call_and_answer needs the task's answer test: test_narrated_calls.py
    assert len(CASES) >= 12
