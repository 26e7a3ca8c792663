"""Both tasks' prompts render through every family, with the tool declared in the family's native format.

The expected declarations come from models/README.md (and, for Qwen3, the real chat template):
- Qwen3 and the generic ChatML family: a `# Tools` section with each signature as JSON (as the
  template's `tojson` writes it) on its own line inside `<tools></tools>`;
- GLM-Z1: a `# 可用工具` section with `## {name}` followed by the tool's JSON;
- Gemma 4: `<|tool>declaration:{name}{description:<|"|>…<|"|>,…}<tool|>`.
"""

from __future__ import annotations

import json

import pytest

from nudgeability.models.families import get_family
from nudgeability.models.testing.tiny_tokenizers import tiny_tokenizer
from nudgeability.splice.tasks import get_task

FAMILIES = ("qwen3", "glm_z1", "gemma4", "chatml")
TASKS = ("musique", "strategyqa")


def _declared(family: str, tool: dict, text: str) -> bool:
    """Whether `text` declares `tool` in `family`'s native format."""
    function = tool["function"]
    if family in ("qwen3", "chatml"):
        # the signatures block opens on its own line (the header's "<tools></tools>" does not)
        start = text.find("\n<tools>\n")
        end = text.find("\n</tools>", start)
        return (
            "# Tools" in text
            and 0 <= start < end
            and f"\n{json.dumps(tool, ensure_ascii=False)}\n" in text[start : end + 1]
        )
    if family == "glm_z1":
        return "# 可用工具" in text and f"## {function['name']}\n" in text
    if family == "gemma4":
        return (
            f'<|tool>declaration:{function["name"]}{{description:<|"|>'
            f'{function["description"]}<|"|>'
        ) in text and "<tool|>" in text
    raise AssertionError(f"no expectation for family {family}")


@pytest.fixture(scope="module")
def first_problems():
    return {name: get_task(name).load()[0] for name in TASKS}


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    tokenizer = tiny_tokenizer(request.param)
    return request.param, tokenizer, get_family(request.param, tokenizer)


def _rendered(family, messages, tools) -> str:
    """The prompt as the family renders it (thinking on), decoded with its special tokens."""
    _, tokenizer, fam = family
    return tokenizer.decode(fam.render(messages, tools, thinking=True), skip_special_tokens=False)


@pytest.mark.parametrize("task_name", TASKS)
def test_with_tool_prompt_declares_the_task_tool_natively(family, first_problems, task_name):
    name = family[0]
    task, problem = get_task(task_name), first_problems[task_name]
    messages, tools = task.with_tool(problem)
    text = _rendered(family, messages, tools)
    assert _declared(name, tools[0], text)
    assert problem.question in text


@pytest.mark.parametrize("task_name", TASKS)
def test_oracle_prompt_declares_ask_expert_natively_and_not_the_scoped_tool(
    family, first_problems, task_name
):
    name = family[0]
    task, problem = get_task(task_name), first_problems[task_name]
    messages, tools = task.oracle(problem)
    text = _rendered(family, messages, tools)
    assert _declared(name, tools[0], text)
    scoped_tool = task.with_tool(problem)[1][0]
    assert not _declared(name, scoped_tool, text)


@pytest.mark.parametrize("task_name", TASKS)
def test_unaided_prompt_declares_no_tool(family, first_problems, task_name):
    name = family[0]
    task, problem = get_task(task_name), first_problems[task_name]
    text = _rendered(family, task.unaided_messages(problem), None)
    assert problem.question in text
    for tool in (task.with_tool(problem)[1][0], task.oracle(problem)[1][0]):
        assert not _declared(name, tool, text)
        assert tool["function"]["name"] not in text


def test_chatml_prompts_carry_the_format_demonstrations_and_native_ones_do_not():
    from nudgeability.models.families import get_family
    from nudgeability.models.testing.tiny_tokenizers import tiny_tokenizer
    from nudgeability.splice.experiment.prompts import render_prompts
    from nudgeability.splice.tasks import get_task
    from nudgeability.splice.tasks.sampling import sample_problems

    task = get_task("strategyqa")
    problem = sample_problems(task.load(), 1, 0)[0]
    for name, shown in (("chatml", True), ("qwen3", False)):
        family = get_family(name, tiny_tokenizer(name))
        prompts = render_prompts(task, family, problem, oracle=True)
        for ids, tool in (
            (prompts.unaided, None),
            (prompts.with_tool, "search"),
            (prompts.oracle, "ask_expert"),
        ):
            text = family.decode(ids)
            assert ("Is the Eiffel Tower in Paris?" in text) is shown
            assert (f'{{"name": "{tool}", "arguments"' in text) is (shown and tool is not None)
            assert (
                text.rstrip().endswith(("<think>", "<|im_start|>assistant"))
                and problem.question in text
            )
