"""A narrated tool call is TOOL; OTHER(call_and_answer) only when the text beside the call holds an
answer in the task's format (the task's own `holds_answer`, passed to the parser).

Every case is hand-written in each family's native call syntax. The expected actions follow the
rules stated in splice/README.md ("Actions"), not the parser's output.
"""

from __future__ import annotations

import pytest

from nudgeability.models.families import Action
from nudgeability.splice.tasks.musique import MusiqueTask
from nudgeability.splice.tasks.strategyqa import StrategyQATask

Q = '<|"|>'
ARGS = {"query": "author of Emma"}
SECOND = {"query": "Emma 1815"}
CLOSE = {
    "qwen3": "</think>\n\n",
    "chatml": "</think>\n",
    "glm_z1": "</think>\n",
    "gemma4": "<channel|>",
}
END = {
    "qwen3": "<|im_end|>",
    "chatml": "<|im_end|>",
    "glm_z1": "<|observation|>",
    "gemma4": "<turn|>",
}
FENCED = '```json\n{"name": "retrieve", "arguments": {"query": "author of Emma"}}\n```'


def call(family: str, args: dict = ARGS) -> str:
    query = args["query"]
    if family in ("qwen3", "chatml"):
        return (
            '<tool_call>\n{"name": "retrieve", "arguments": {"query": "'
            + query
            + '"}}\n</tool_call>'
        )
    if family == "glm_z1":
        return 'retrieve\n{"query": "' + query + '"}'
    return f"<|tool_call>call:retrieve{{query:{Q}{query}{Q}}}<tool_call|>"


def tool(narration: str | None, args: dict = ARGS) -> Action:
    return Action("TOOL", tool_name="retrieve", arguments=args, narration=narration)


FAMILIES = ("qwen3", "chatml", "glm_z1", "gemma4")


def cases(family: str):
    c = call(family)
    sep = "\n" if family != "gemma4" else ""
    return [
        ("narration_before", "Let me look that up." + sep + c, tool("Let me look that up.")),
        ("markdown_plan_before", "**Plan:** use the tool.\n" + c, tool("**Plan:** use the tool.")),
        (
            "narration_after",
            c + "\nI will wait for the result.",
            tool("I will wait for the result."),
        ),
        (
            "answer_line_and_call",
            "Answer: yes\n" + c,
            Action(
                "OTHER", tool_name="retrieve", reason="call_and_answer", narration="Answer: yes"
            ),
        ),
        (
            "call_then_answer_line",
            c + "\nAnswer: no",
            Action("OTHER", tool_name="retrieve", reason="call_and_answer", narration="Answer: no"),
        ),
        (
            "fenced_json_call",
            FENCED,
            Action("OTHER", tool_name="retrieve", reason="call_outside_format", narration=FENCED),
        ),
        ("two_calls_take_the_first", c + "\n" + call(family, SECOND), tool(None)),
        ("bare_call", c, tool(None)),
    ]


ALL = [(f, *case) for f in FAMILIES for case in cases(f)]


@pytest.mark.parametrize(
    "family,text,expected", [(f, t, e) for f, _, t, e in ALL], ids=[f"{f}-{n}" for f, n, *_ in ALL]
)
def test_narrated_and_answered_calls(make_family, family, text, expected):
    fam = make_family(family)
    ids = fam.encode(CLOSE[family] + text + END[family])
    action = fam.parse_action(
        ids, "stop_token", tools=["retrieve"], is_answer=StrategyQATask().holds_answer
    )
    assert action == expected


@pytest.mark.parametrize("family", FAMILIES)
def test_an_unreadable_answer_label_is_narration_for_strategyqa_but_an_answer_for_musique(
    make_family, family
):
    """'Answer: let me check' is not a yes/no (StrategyQA's format) but is a MuSiQue answer span."""
    fam = make_family(family)
    text = "Answer: let me check\n" + call(family)
    ids = fam.encode(CLOSE[family] + text + END[family])
    sqa = fam.parse_action(ids, "eos", tools=["retrieve"], is_answer=StrategyQATask().holds_answer)
    musique = fam.parse_action(ids, "eos", tools=["retrieve"], is_answer=MusiqueTask().holds_answer)
    assert sqa == tool("Answer: let me check")
    assert musique.kind == "OTHER" and musique.reason == "call_and_answer"


@pytest.mark.parametrize("family", FAMILIES)
def test_fenced_json_of_an_undeclared_name_is_a_self_answer(make_family, family):
    fam = make_family(family)
    fenced = FENCED.replace('"retrieve"', '"lookup"')
    ids = fam.encode(CLOSE[family] + fenced + END[family])
    assert fam.parse_action(ids, "eos", tools=["retrieve"]) == Action("SELF", answer=fenced)


def test_holds_answer_follows_each_task_format():
    sqa, musique = StrategyQATask(), MusiqueTask()
    assert sqa.holds_answer("**Answer:** Yes, because it is.")
    assert not sqa.holds_answer("Let me check. yes")  # no label
    assert not sqa.holds_answer("Answer: maybe")
    assert musique.holds_answer("Final answer: Jane Austen")
    assert not musique.holds_answer("I will look up the author.")
    assert not musique.holds_answer("Answer:")  # a label with nothing after it
