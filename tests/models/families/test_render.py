"""Prompt rendering: system + user + one tool gives exactly the documented text in every family
(models/README.md), and the Qwen3 renderer gives what the real Qwen3 template gives. The other
families against their real templates: test_real_templates.py."""

from __future__ import annotations

import copy

import pytest

from nudgeability.models.families import FamilyError, get_family
from nudgeability.models.testing.tiny_tokenizers import chat_template, tiny_tokenizer

# Hand-written from the format descriptions in models/README.md and the templates they cite.
# Qwen3 and generic ChatML open with the same system turn and Hermes-style tool declaration.
HERMES_TOOLS = (
    "<|im_start|>system\nYou answer questions.\n\n# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    '{"type": "function", "function": {"name": "retrieve", "description": "Return the most relevant supplied '
    'paragraph.", "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": '
    '"What to look for."}}, "required": ["query"]}}}\n</tools>\n\n'
)
EXPECTED = {
    "qwen3": (
        HERMES_TOOLS
        + "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nWho wrote Emma?<|im_end|>\n"
        "<|im_start|>assistant\n"
    ),
    "glm_z1": (
        "[gMASK]<sop><|system|>\n你是一个名为 ChatGLM 的人工智能助手。你是基于智谱 AI 公司训练的语言模型 GLM-4 模型开发的，"
        "你的任务是针对用户的问题和要求提供适当的答复和支持。\n\n# 可用工具\n## retrieve\n\n"
        "{\n"
        '    "name": "retrieve",\n'
        '    "description": "Return the most relevant supplied paragraph.",\n'
        '    "parameters": {\n'
        '        "type": "object",\n'
        '        "properties": {\n'
        '            "query": {\n'
        '                "type": "string",\n'
        '                "description": "What to look for."\n'
        "            }\n"
        "        },\n"
        '        "required": [\n'
        '            "query"\n'
        "        ]\n"
        "    }\n"
        "}\n在调用上述函数时，请使用 Json 格式表示调用的参数。"
        "<|system|>\nYou answer questions.<|user|>\nWho wrote Emma?<|assistant|>\n<think>"
    ),
    "gemma4": (
        "<bos><|turn>system\n<|think|>\nYou answer questions."
        '<|tool>declaration:retrieve{description:<|"|>Return the most relevant supplied paragraph.<|"|>,'
        'parameters:{properties:{query:{description:<|"|>What to look for.<|"|>,type:<|"|>STRING<|"|>}},'
        'required:[<|"|>query<|"|>],type:<|"|>OBJECT<|"|>}}<tool|><turn|>\n'
        "<|turn>user\nWho wrote Emma?<turn|>\n"
        "<|turn>model\n"
    ),
    "chatml": (
        HERMES_TOOLS
        + "# Format\n\nFirst think step by step between <think> and </think>. After </think>, do one of two things: "
        "write your final answer, or call a function by returning a json object with function name and arguments "
        "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nWho wrote Emma?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    ),
}
# Gemma 4's small-model template (the tiny tokenizer's) pre-fills nothing; GLM-Z1 has no switch.
NO_THINKING_ENDING = {
    "qwen3": "<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "glm_z1": "<|user|>\nWho wrote Emma?<|assistant|>\n<think>",
    "gemma4": "<|turn>user\nWho wrote Emma?<turn|>\n<|turn>model\n",
    "chatml": "<|im_start|>assistant\n<think>\n\n</think>\n\n",
}
FAMILY_NAMES = sorted(EXPECTED)


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_family_renderer_gives_the_documented_text(make_family, conversation, retrieve_tool, name):
    assert make_family(name).own_text(conversation, [retrieve_tool]) == EXPECTED[name]


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_tiny_tokenizer_chat_template_gives_the_documented_text(conversation, retrieve_tool, name):
    text = tiny_tokenizer(name).apply_chat_template(
        conversation,
        tools=[retrieve_tool],
        add_generation_prompt=True,
        tokenize=False,
        enable_thinking=True,
    )
    assert text == EXPECTED[name]


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_render_ids_decode_to_the_documented_text_and_repeat_exactly(
    make_family, conversation, retrieve_tool, name
):
    fam = make_family(name)
    ids = fam.render(conversation, tools=[retrieve_tool])
    assert fam.decode(ids) == EXPECTED[name]
    assert fam.render(conversation, tools=[retrieve_tool]) == ids


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_thinking_off_ends_the_prompt_as_the_template_does(
    make_family, conversation, retrieve_tool, name
):
    fam = make_family(name)
    own = fam.own_text(conversation, [retrieve_tool], thinking=False)
    assert own.endswith(NO_THINKING_ENDING[name])
    assert fam.render_text(conversation, [retrieve_tool], thinking=False) == own
    assert "<|think|>" not in own


def _qwen3_conversations(tool):
    second = {
        "type": "function",
        "function": {"name": "search", "description": "Search.", "parameters": {}},
    }
    sys_user = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Who wrote Emma?"},
    ]
    multi_turn = sys_user + [
        {
            "role": "assistant",
            "content": "<think>\nI should look it up.\n</think>\n\n",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "retrieve", "arguments": {"query": "Emma"}},
                }
            ],
        },
        {"role": "tool", "content": "Emma is a novel by Jane Austen."},
        {"role": "tool", "content": "It was published in 1815."},
        {
            "role": "assistant",
            "content": "<think>\nThe paragraph says so.\n</think>\n\nJane Austen.",
        },
        {"role": "user", "content": "And when?"},
    ]
    return [
        (sys_user, [tool], True),
        (sys_user[1:], [tool], True),
        (sys_user, None, True),
        (sys_user[1:], None, True),
        (sys_user, [tool, second], True),
        (sys_user, [tool], False),
        (multi_turn, [tool], True),
        (multi_turn[:-1], None, False),
    ]


def test_qwen3_renderer_matches_the_real_qwen3_template(make_family, retrieve_tool):
    fam = make_family("qwen3")
    real = chat_template("qwen3.jinja")
    for messages, tools, thinking in _qwen3_conversations(retrieve_tool):
        expected = fam.tokenizer.apply_chat_template(
            messages,
            tools=tools,
            add_generation_prompt=True,
            tokenize=False,
            enable_thinking=thinking,
            chat_template=real,
        )
        assert fam.own_text(messages, tools, thinking) == expected


def test_render_prefers_a_checkpoint_template_that_renders_tools(conversation, retrieve_tool):
    tok = copy.deepcopy(tiny_tokenizer("qwen3"))
    tok.chat_template = "{% for t in tools or [] %}TOOL={{ t.function.name }};{% endfor %}{{ messages[-1].content }}"
    fam = get_family("qwen3", tok)
    assert fam.uses_checkpoint_template
    assert fam.render_text(conversation, [retrieve_tool]) == "TOOL=retrieve;Who wrote Emma?"


def test_render_falls_back_to_own_renderer_when_the_template_ignores_tools(
    conversation, retrieve_tool
):
    tok = copy.deepcopy(tiny_tokenizer("qwen3"))
    # SmolLM2's shipped template: ChatML with no tool support.
    tok.chat_template = (
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
        "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )
    fam = get_family("qwen3", tok)
    assert not fam.uses_checkpoint_template
    assert fam.render_text(conversation, [retrieve_tool]) == EXPECTED["qwen3"]


def test_chatml_never_uses_the_checkpoint_template(conversation, retrieve_tool):
    tok = copy.deepcopy(tiny_tokenizer("chatml"))
    tok.chat_template = "{% for t in tools or [] %}TOOL={{ t.function.name }};{% endfor %}"
    fam = get_family("chatml", tok)
    assert not fam.uses_checkpoint_template
    assert fam.render_text(conversation, [retrieve_tool]) == EXPECTED["chatml"]


@pytest.mark.parametrize(
    "messages,tools,field",
    [
        ([], None, "messages"),
        ([{"role": "user"}], None, "messages[0]['content']"),
        ([{"role": "robot", "content": "hi"}], None, "messages[0]"),
        ([{"role": "user", "content": "hi"}], [{"name": "retrieve"}], "tools[0]"),
    ],
)
def test_render_rejects_malformed_input_naming_the_field(make_family, messages, tools, field):
    with pytest.raises(FamilyError, match=field.replace("[", r"\[").replace("]", r"\]")):
        make_family("qwen3").render(messages, tools)
