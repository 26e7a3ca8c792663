"""Gemma 4: hand-written completions after the cut (think-close `<channel|>`), each with the Action
it must parse to."""

from __future__ import annotations

import pytest

from nudgeability.models.families import Action

R = "retrieve"
Q = '<|"|>'
ARGS = {"query": "author of Emma"}
CALL = f"<|tool_call>call:retrieve{{query:{Q}author of Emma{Q}}}<tool_call|>"
CONFIDENT = "I am confident that my answer is correct."

# (case id, text after the cut, finish_reason, splice prefix or None, expected action)
CASES = [
    (
        "clean_self",
        "<channel|>Jane Austen wrote Emma.<turn|>",
        "stop_token",
        None,
        Action("SELF", answer="Jane Austen wrote Emma."),
    ),
    (
        "clean_tool",
        "<channel|>" + CALL,
        "stop_token",
        None,
        Action("TOOL", tool_name=R, arguments=ARGS),
    ),
    (
        "tool_with_whitespace",
        f"<channel|>\n\n<|tool_call> call : retrieve {{ query : {Q}author of Emma{Q} }} <tool_call|>\n",
        "stop_token",
        None,
        Action("TOOL", tool_name=R, arguments=ARGS),
    ),
    (
        "tool_json_style_quotes",
        '<channel|><|tool_call>call:retrieve{"query": "author of Emma"}<tool_call|>',
        "stop_token",
        None,
        Action("TOOL", tool_name=R, arguments=ARGS),
    ),
    (
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
    (
        "tool_close_eaten_by_stop",
        f"<channel|><|tool_call>call:retrieve{{query:{Q}author of Emma{Q}}}",
        "stop_string",
        None,
        Action("TOOL", tool_name=R, arguments=ARGS),
    ),
    (
        "other_undeclared_tool",
        f"<channel|><|tool_call>call:search{{query:{Q}Emma{Q}}}<tool_call|>",
        "stop_token",
        None,
        Action("OTHER", tool_name="search", reason="undeclared_tool"),
    ),
    (
        "other_unterminated_string",
        f"<channel|><|tool_call>call:retrieve{{query:{Q}Emma}}<tool_call|>",
        "stop_token",
        None,
        Action("OTHER", tool_name=R, reason="unparsable_arguments"),
    ),
    (
        "other_missing_colon",
        f"<channel|><|tool_call>call:retrieve{{query {Q}Emma{Q}}}<tool_call|>",
        "stop_token",
        None,
        Action("OTHER", tool_name=R, reason="unparsable_arguments"),
    ),
    (
        "other_no_call_prefix",
        f"<channel|><|tool_call>retrieve{{query:{Q}Emma{Q}}}<tool_call|>",
        "stop_token",
        None,
        Action("OTHER", reason="unparsable_arguments"),
    ),
    (
        "tool_text_beside_a_call_is_narration_without_an_answer_format",
        "<channel|>It is Jane Austen." + CALL,
        "stop_token",
        None,
        Action("TOOL", tool_name=R, arguments=ARGS, narration="It is Jane Austen."),
    ),
    (
        "other_empty_commitment",
        "<channel|>\n<turn|>",
        "stop_token",
        None,
        Action("OTHER", reason="empty_commitment"),
    ),
    (
        "other_think_never_closed",
        "<|channel>thought\nEmma is a novel<turn|>",
        "stop_token",
        None,
        Action("OTHER", reason="think_never_closed"),
    ),
    (
        "trunc_in_thinking",
        "<|channel>thought\nEmma is a novel by",
        "length",
        None,
        Action("TRUNC", reason="budget_in_thinking"),
    ),
    (
        "trunc_in_tool_call",
        f"<channel|><|tool_call>call:retrieve{{query:{Q}auth",
        "length",
        None,
        Action("TRUNC", reason="budget_in_tool_call"),
    ),
    (
        "trunc_in_answer",
        "<channel|>Jane",
        "length",
        None,
        Action("TRUNC", reason="budget_in_answer"),
    ),
    (
        "open_arm_reasons_on_then_closes",
        "So I will answer.<channel|>Jane Austen.<turn|>",
        "stop_token",
        (CONFIDENT, False),
        Action("SELF", answer="Jane Austen."),
    ),
    (
        "sealed_arm_channel_reopened_then_closed",
        "<|channel>thought\nCheck anyway.<channel|>" + CALL,
        "stop_token",
        (CONFIDENT, True),
        Action("TOOL", tool_name=R, arguments=ARGS),
    ),
    (
        "sealed_arm_channel_reopened_turn_ends",
        "<|channel>thought\nHmm.<turn|>",
        "stop_token",
        (CONFIDENT, True),
        Action("OTHER", reason="think_reopened"),
    ),
    (
        "two_closes_reads_after_the_last",
        "<channel|>Maybe Rome.<channel|>Jane Austen.<turn|>",
        "eos",
        None,
        Action("SELF", answer="Jane Austen."),
    ),
]


@pytest.mark.parametrize(
    "text,finish,prefix,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_gemma4_completion_parses_to_expected_action(parse_case, text, finish, prefix, expected):
    assert parse_case("gemma4", text, finish, prefix) == expected
