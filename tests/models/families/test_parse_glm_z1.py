"""GLM-Z1: hand-written completions after the cut (multi-token `</think>` in the tiny vocabulary),
each with the Action it must parse to."""

from __future__ import annotations

import pytest

from nudgeability.models.families import Action

R = "retrieve"
ARGS = {"query": "author of Emma"}
CALL = 'retrieve\n{"query": "author of Emma"}'
DOUBT = "I am not sure that my answer is correct."

# (case id, text after the cut, finish_reason, splice prefix or None, expected action)
CASES = [
    (
        "clean_self",
        "</think>\nJane Austen wrote Emma.<|user|>",
        "stop_token",
        None,
        Action("SELF", answer="Jane Austen wrote Emma."),
    ),
    (
        "self_after_assistant_token",
        "</think><|assistant|>\nJane Austen.<|user|>",
        "stop_token",
        None,
        Action("SELF", answer="Jane Austen."),
    ),
    (
        "clean_tool",
        "</think>\n" + CALL + "<|observation|>",
        "stop_token",
        None,
        Action("TOOL", tool_name=R, arguments=ARGS),
    ),
    (
        "tool_after_assistant_token",
        '</think><|assistant|>retrieve\n{"query": "author of Emma"}<|observation|>',
        "stop_token",
        None,
        Action("TOOL", tool_name=R, arguments=ARGS),
    ),
    (
        "tool_assistant_token_on_own_line",
        '</think>\n<|assistant|>\nretrieve\n{"query": "author of Emma"}<|observation|>',
        "stop_token",
        None,
        Action("TOOL", tool_name=R, arguments=ARGS),
    ),
    (
        "tool_extra_whitespace",
        '</think>\n\n  retrieve  \n   {"query":"author of Emma"}  \n<|observation|>',
        "stop_token",
        None,
        Action("TOOL", tool_name=R, arguments=ARGS),
    ),
    (
        "tool_nested_braces_in_arguments",
        '</think>\nretrieve\n{"query": "author of Emma", "filter": {"year": 1815}}',
        "eos",
        None,
        Action(
            "TOOL", tool_name=R, arguments={"query": "author of Emma", "filter": {"year": 1815}}
        ),
    ),
    (
        "other_undeclared_tool",
        '</think>\nsearch\n{"query": "Emma"}<|observation|>',
        "stop_token",
        None,
        Action("OTHER", tool_name="search", reason="undeclared_tool"),
    ),
    (
        "other_unparsable_json",
        '</think>\nretrieve\n{"query": Emma}<|observation|>',
        "stop_token",
        None,
        Action("OTHER", tool_name=R, reason="unparsable_arguments"),
    ),
    (
        "other_unclosed_json_at_end_of_turn",
        '</think>\nretrieve\n{"query": "Emma"<|observation|>',
        "stop_token",
        None,
        Action("OTHER", tool_name=R, reason="unparsable_arguments"),
    ),
    (
        "tool_text_beside_a_call_is_narration_without_an_answer_format",
        "</think>\nThe author is Jane Austen.\n" + CALL,
        "stop_token",
        None,
        Action("TOOL", tool_name=R, arguments=ARGS, narration="The author is Jane Austen."),
    ),
    (
        "other_empty_commitment",
        "</think>\n<|user|>",
        "stop_token",
        None,
        Action("OTHER", reason="empty_commitment"),
    ),
    (
        "other_think_never_closed",
        "Emma was written by<|endoftext|>",
        "eos",
        None,
        Action("OTHER", reason="think_never_closed"),
    ),
    (
        "trunc_in_thinking",
        "Emma was written by someone whose",
        "length",
        None,
        Action("TRUNC", reason="budget_in_thinking"),
    ),
    (
        "trunc_in_tool_call",
        '</think>\nretrieve\n{"query": "auth',
        "length",
        None,
        Action("TRUNC", reason="budget_in_tool_call"),
    ),
    (
        "trunc_in_answer",
        "</think>\nJane",
        "length",
        None,
        Action("TRUNC", reason="budget_in_answer"),
    ),
    (
        "self_is_not_a_call_when_no_json_follows",
        "</think>\nretrieve\nthe paragraph yourself<|user|>",
        "stop_token",
        None,
        Action("SELF", answer="retrieve\nthe paragraph yourself"),
    ),
    (
        "open_arm_reasons_on_then_calls",
        "So I should look it up.</think>\n" + CALL,
        "stop_token",
        (DOUBT, False),
        Action("TOOL", tool_name=R, arguments=ARGS),
    ),
    (
        "sealed_arm_think_reopened_then_closed",
        "<think>Let me reconsider.</think>\nJane Austen.<|user|>",
        "stop_token",
        (DOUBT, True),
        Action("SELF", answer="Jane Austen."),
    ),
    (
        "sealed_arm_think_reopened_budget_ends",
        "<think>Let me reconsider whether",
        "length",
        (DOUBT, True),
        Action("TRUNC", reason="budget_in_thinking"),
    ),
    (
        "two_closes_reads_after_the_last",
        "</think>\nPerhaps Rome.</think>\n" + CALL,
        "stop_token",
        None,
        Action("TOOL", tool_name=R, arguments=ARGS),
    ),
]


@pytest.mark.parametrize(
    "text,finish,prefix,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_glm_z1_completion_parses_to_expected_action(parse_case, text, finish, prefix, expected):
    assert parse_case("glm_z1", text, finish, prefix) == expected


def test_glm_z1_close_marker_is_multi_token_in_the_tiny_vocabulary(make_family):
    assert len(make_family("glm_z1").think_close_ids) > 1
