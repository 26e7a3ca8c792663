"""Generic ChatML: hand-written completions after the cut, with plain-text (multi-token) `</think>`
and `<tool_call>` tags, each with the Action it must parse to."""

from __future__ import annotations

import pytest
from helpers.parse_cases import ARGS, DOUBT, FIELDS, TOOL_CALL, R, case

from nudgeability.models.families import Action

CALL = '<tool_call>\n{"name": "retrieve", "arguments": {"query": "author of Emma"}}\n</tool_call>'

CASES = [
    case(
        "clean_self",
        "</think>\n\nJane Austen wrote Emma.<|im_end|>",
        "eos",
        None,
        Action("SELF", answer="Jane Austen wrote Emma."),
    ),
    case("clean_tool", "</think>\n\n" + CALL, "stop_string", None, TOOL_CALL),
    case(
        "tool_no_whitespace",
        '</think><tool_call>{"name":"retrieve","arguments":{"query":"author of Emma"}}</tool_call>',
        "stop_string",
        None,
        TOOL_CALL,
    ),
    case(
        "tool_spaces_inside_tags",
        '</think>\n <tool_call>   {"name": "retrieve",\n\t"arguments": {"query": "author of Emma"}}   </tool_call> ',
        "stop_string",
        None,
        TOOL_CALL,
    ),
    case(
        "other_undeclared_tool",
        '</think>\n<tool_call>\n{"name": "wikipedia", "arguments": {"q": "Emma"}}\n</tool_call>',
        "stop_string",
        None,
        Action("OTHER", tool_name="wikipedia", reason="undeclared_tool"),
    ),
    case(
        "other_unparsable_json",
        "</think>\n<tool_call>\n{name: retrieve, arguments: {query: Emma}}\n</tool_call>",
        "stop_string",
        None,
        Action("OTHER", reason="unparsable_arguments"),
    ),
    case(
        "other_trailing_text_inside_call",
        '</think>\n<tool_call>\n{"name": "retrieve", "arguments": {"query": "x"}} please\n</tool_call>',
        "stop_string",
        None,
        Action("OTHER", tool_name=R, reason="unparsable_arguments"),
    ),
    case(
        "tool_text_beside_a_call_is_narration_without_an_answer_format",
        "</think>\nJane Austen.\n" + CALL,
        "stop_string",
        None,
        Action("TOOL", tool_name=R, arguments=ARGS, narration="Jane Austen."),
    ),
    case(
        "other_empty_commitment",
        "</think>\n\n<|im_end|>",
        "eos",
        None,
        Action("OTHER", reason="empty_commitment"),
    ),
    case(
        "other_think_never_closed",
        "I am a helpful assistant.<|im_end|>",
        "eos",
        None,
        Action("OTHER", reason="think_never_closed"),
    ),
    case(
        "trunc_in_thinking",
        "The question asks who wrote the book and",
        "length",
        None,
        Action("TRUNC", reason="budget_in_thinking"),
    ),
    case(
        "trunc_in_tool_call",
        '</think>\n<tool_call>\n{"name": "retr',
        "length",
        None,
        Action("TRUNC", reason="budget_in_tool_call"),
    ),
    case(
        "trunc_in_answer",
        "</think>\nThe author",
        "length",
        None,
        Action("TRUNC", reason="budget_in_answer"),
    ),
    case(
        "close_preceded_by_space",
        "the answer is clear. </think> Jane Austen.<|im_end|>",
        "eos",
        None,
        Action("SELF", answer="Jane Austen."),
    ),
    case(
        "open_arm_reasons_on_then_calls",
        "So I will check.\n</think>\n" + CALL,
        "stop_string",
        (DOUBT, False),
        TOOL_CALL,
    ),
    case(
        "sealed_arm_think_reopened_then_closed",
        "\n<think>\nOn reflection I know it.\n</think>\nJane Austen.<|im_end|>",
        "eos",
        (DOUBT, True),
        Action("SELF", answer="Jane Austen."),
    ),
    case(
        "sealed_arm_think_reopened_budget_ends",
        "\n<think>\nOn reflection",
        "length",
        (DOUBT, True),
        Action("TRUNC", reason="budget_in_thinking"),
    ),
    case(
        "two_closes_reads_after_the_last",
        "</think>\nRome?\n</think>\n" + CALL,
        "stop_string",
        None,
        TOOL_CALL,
    ),
]


@pytest.mark.parametrize(FIELDS, CASES)
def test_chatml_completion_parses_to_expected_action(parse_case, text, finish, prefix, expected):
    assert parse_case("chatml", text, finish, prefix) == expected


def test_chatml_markers_are_multi_token_in_the_tiny_vocabulary(make_family):
    fam = make_family("chatml")
    assert len(fam.think_close_ids) > 1 and len(fam.encode("<tool_call>")) > 1
    assert fam.stop_strings == ["</tool_call>"]  # multi-token, so it must be a stop string
