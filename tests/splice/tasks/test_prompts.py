"""The three prompts of each task, as messages and OpenAI-format tools (before any family renders them)."""

from __future__ import annotations

import json

import pytest

from nudgeability.splice.tasks import get_task


@pytest.fixture(scope="module")
def problems():
    return {name: get_task(name).load()[0] for name in ("musique", "strategyqa")}


def _tool_declaration(tool: dict) -> tuple[str, list[str]]:
    assert tool["type"] == "function"
    function = tool["function"]
    schema = function["parameters"]
    assert schema["type"] == "object" and isinstance(function["description"], str)
    assert all(spec["type"] == "string" for spec in schema["properties"].values())
    return function["name"], schema["required"]


def test_musique_unaided_prompt_carries_the_question_and_all_20_paragraphs_in_order(problems):
    problem = problems["musique"]
    messages = get_task("musique").unaided_messages(problem)
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]["content"]
    positions = [
        user.index(f"Paragraph {k}: {title}\n{text}")
        for k, (title, text) in enumerate(problem.context, start=1)
    ]
    assert positions == sorted(positions) and len(positions) == 20
    assert user.endswith(f"Question: {problem.question}")


@pytest.mark.parametrize("name, tool", [("musique", "retrieve"), ("strategyqa", "search")])
def test_unaided_prompt_mentions_no_tool(problems, name, tool):
    messages = get_task(name).unaided_messages(problems[name])
    system = messages[0]["content"]
    assert "tool" not in system and tool not in system and "ask_expert" not in system
    assert "Answer:" in system  # the answer format is stated


@pytest.mark.parametrize(
    "name, tool, argument", [("musique", "retrieve", "query"), ("strategyqa", "search", "query")]
)
def test_with_tool_prompt_declares_only_the_task_tool_and_keeps_the_user_turn(
    problems, name, tool, argument
):
    task = get_task(name)
    messages, tools = task.with_tool(problems[name])
    assert [_tool_declaration(t) for t in tools] == [(tool, [argument])]
    assert task.tool_names == (tool,)
    assert f"`{tool}`" in messages[0]["content"]
    # the paired prompts differ only in the system turn
    assert messages[1] == task.unaided_messages(problems[name])[1]
    json.dumps(tools)  # serialisable for the manifest and the family templates


@pytest.mark.parametrize("name", ["musique", "strategyqa"])
def test_oracle_prompt_swaps_the_tool_for_a_free_correct_ask_expert(problems, name):
    task = get_task(name)
    messages, tools = task.oracle(problems[name])
    assert [_tool_declaration(t) for t in tools] == [("ask_expert", ["question"])]
    assert task.oracle_tool_names == ("ask_expert",)
    description = tools[0]["function"]["description"]
    assert "correct worked answer" in description and "no cost" in description
    assert task.tool_names[0] not in messages[0]["content"]
    # same user turn, and the system turn differs from the scoped one only in the tool
    scoped_messages, _ = task.with_tool(problems[name])
    assert messages[1] == scoped_messages[1]


def test_musique_retrieve_is_described_as_returning_the_most_relevant_supplied_paragraph(problems):
    _, tools = get_task("musique").with_tool(problems["musique"])
    assert "most relevant of the supplied paragraphs" in tools[0]["function"]["description"]


def test_strategyqa_prompts_do_not_leak_facts_or_decomposition(problems):
    # the first shipped record's facts include "Genghis Khan had sixteen children."
    task = get_task("strategyqa")
    problem = problems["strategyqa"]
    for messages in (
        task.unaided_messages(problem),
        task.with_tool(problem)[0],
        task.oracle(problem)[0],
    ):
        text = json.dumps(messages)
        assert "sixteen children" not in text and problem.question in text


def test_prompt_methods_return_fresh_objects(problems):
    task = get_task("musique")
    messages, tools = task.with_tool(problems["musique"])
    messages[0]["content"] = "changed"
    tools[0]["function"]["name"] = "changed"
    again_messages, again_tools = task.with_tool(problems["musique"])
    assert again_messages[0]["content"] != "changed"
    assert again_tools[0]["function"]["name"] == "retrieve"
