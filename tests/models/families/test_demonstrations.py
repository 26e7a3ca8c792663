"""Only the generic ChatML family shows worked exchanges; native formats need none."""

from __future__ import annotations

import pytest

from nudgeability.models.families import get_family
from nudgeability.models.testing.tiny_tokenizers import tiny_tokenizer

TOOL = {
    "type": "function",
    "function": {
        "name": "ask_expert",
        "description": "Ask an expert.",
        "parameters": {
            "type": "object",
            "properties": {"question": {"type": "string"}},
            "required": ["question"],
        },
    },
}


@pytest.mark.parametrize("name", ["qwen3", "glm_z1", "gemma4"])
def test_native_families_show_no_demonstrations(name):
    assert get_family(name, tiny_tokenizer(name)).demonstrations([TOOL]) == []


def test_chatml_demonstrates_an_answer_and_a_call_of_the_declared_tool_in_its_own_format():
    family = get_family("chatml", tiny_tokenizer("chatml"))
    shown = family.demonstrations([TOOL])
    rendered = family.render_text(shown + [{"role": "user", "content": "Q?"}], tools=[TOOL])
    expected_tail = (
        "<|im_start|>user\nQuestion: Is the Eiffel Tower in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nThe Eiffel Tower is a landmark in Paris. I am sure of this.\n</think>\n"
        "Answer: yes<|im_end|>\n"
        "<|im_start|>user\nQuestion: Who was the mayor of Springfield, Illinois in 1931?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nI do not know this, so I will use the tool.\n</think>\n<tool_call>\n"
        '{"name": "ask_expert", "arguments": {"question": "Who was the mayor of Springfield, Illinois in 1931?"}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )
    assert rendered.endswith(expected_tail)
    # The demonstrated answer and call parse as the family reads a real commitment.
    answer = family.encode("</think>\nAnswer: yes<|im_end|>")
    call = family.encode(
        rendered[rendered.rindex("</think>\n<tool_call>") : rendered.rindex("<|im_start|>user")]
    )
    assert family.parse_action(answer, "eos", [TOOL]).kind == "SELF"
    assert family.parse_action(call, "eos", [TOOL]).kind == "TOOL"


def test_chatml_without_tools_demonstrates_only_the_direct_answer():
    shown = get_family("chatml", tiny_tokenizer("chatml")).demonstrations(None)
    assert [m["role"] for m in shown] == ["user", "assistant"]
    assert "tool_calls" not in shown[1]
