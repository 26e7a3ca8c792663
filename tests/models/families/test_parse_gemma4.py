"""Gemma 4: hand-written completions after the cut (think-close `<channel|>`), each with the Action
it must parse to."""

from __future__ import annotations

import pytest
from helpers.parse_cases import ARGS, CONFIDENT, FIELDS, TOOL_CALL, R, case

from nudgeability.models.families import Action

Q = '<|"|>'
CALL = f"<|tool_call>call:retrieve{{query:{Q}author of Emma{Q}}}<tool_call|>"

CASES = [
    case(
        "clean_self",
        "<channel|>Jane Austen wrote Emma.<turn|>",
        "stop_token",
        None,
        Action("SELF", answer="Jane Austen wrote Emma."),
    ),
    case("clean_tool", "<channel|>" + CALL, "stop_token", None, TOOL_CALL),
    case(
        "tool_with_whitespace",
        f"<channel|>\n\n<|tool_call> call : retrieve {{ query : {Q}author of Emma{Q} }} <tool_call|>\n",
        "stop_token",
        None,
        TOOL_CALL,
    ),
    case(
        "tool_json_style_quotes",
        '<channel|><|tool_call>call:retrieve{"query": "author of Emma"}<tool_call|>',
        "stop_token",
        None,
        TOOL_CALL,
    ),
    case(
        "tool_typed_nested_arguments",
        f"<channel|><|tool_call>call:retrieve{{k:3,opts:{{deep:true,tags:[{Q}a{Q},{Q}b{Q}]}},query:{Q}x, y{Q}}}<tool_call|>",
        "stop_token",
        None,
        Action(
            "TOOL",
            tool_name=R,
            arguments={"k": 3, "opts": {"deep": True, "tags": ["a", "b"]}, "query": "x, y"},
        ),
    ),
    case(
        "tool_close_eaten_by_stop",
        f"<channel|><|tool_call>call:retrieve{{query:{Q}author of Emma{Q}}}",
        "stop_string",
        None,
        TOOL_CALL,
    ),
    case(
        "other_undeclared_tool",
        f"<channel|><|tool_call>call:search{{query:{Q}Emma{Q}}}<tool_call|>",
        "stop_token",
        None,
        Action("OTHER", tool_name="search", reason="undeclared_tool"),
    ),
    case(
        "other_unterminated_string",
        f"<channel|><|tool_call>call:retrieve{{query:{Q}Emma}}<tool_call|>",
        "stop_token",
        None,
        Action("OTHER", tool_name=R, reason="unparsable_arguments"),
    ),
    case(
        "other_missing_colon",
        f"<channel|><|tool_call>call:retrieve{{query {Q}Emma{Q}}}<tool_call|>",
        "stop_token",
        None,
        Action("OTHER", tool_name=R, reason="unparsable_arguments"),
    ),
    case(
        "other_no_call_prefix",
        f"<channel|><|tool_call>retrieve{{query:{Q}Emma{Q}}}<tool_call|>",
        "stop_token",
        None,
        Action("OTHER", reason="unparsable_arguments"),
    ),
    case(
        "tool_text_beside_a_call_is_narration_without_an_answer_format",
        "<channel|>It is Jane Austen." + CALL,
        "stop_token",
        None,
        Action("TOOL", tool_name=R, arguments=ARGS, narration="It is Jane Austen."),
    ),
    case(
        "other_empty_commitment",
        "<channel|>\n<turn|>",
        "stop_token",
        None,
        Action("OTHER", reason="empty_commitment"),
    ),
    case(
        "other_think_never_closed",
        "<|channel>thought\nEmma is a novel<turn|>",
        "stop_token",
        None,
        Action("OTHER", reason="think_never_closed"),
    ),
    case(
        "trunc_in_thinking",
        "<|channel>thought\nEmma is a novel by",
        "length",
        None,
        Action("TRUNC", reason="budget_in_thinking"),
    ),
    case(
        "trunc_in_tool_call",
        f"<channel|><|tool_call>call:retrieve{{query:{Q}auth",
        "length",
        None,
        Action("TRUNC", reason="budget_in_tool_call"),
    ),
    case(
        "trunc_in_answer",
        "<channel|>Jane",
        "length",
        None,
        Action("TRUNC", reason="budget_in_answer"),
    ),
    case(
        "open_arm_reasons_on_then_closes",
        "So I will answer.<channel|>Jane Austen.<turn|>",
        "stop_token",
        (CONFIDENT, False),
        Action("SELF", answer="Jane Austen."),
    ),
    case(
        "sealed_arm_channel_reopened_then_closed",
        "<|channel>thought\nCheck anyway.<channel|>" + CALL,
        "stop_token",
        (CONFIDENT, True),
        TOOL_CALL,
    ),
    case(
        "sealed_arm_channel_reopened_turn_ends",
        "<|channel>thought\nHmm.<turn|>",
        "stop_token",
        (CONFIDENT, True),
        Action("OTHER", reason="think_reopened"),
    ),
    case(
        "two_closes_reads_after_the_last",
        "<channel|>Maybe Rome.<channel|>Jane Austen.<turn|>",
        "eos",
        None,
        Action("SELF", answer="Jane Austen."),
    ),
]


@pytest.mark.parametrize(FIELDS, CASES)
def test_gemma4_completion_parses_to_expected_action(parse_case, text, finish, prefix, expected):
    assert parse_case("gemma4", text, finish, prefix) == expected
