"""Each family renders as its model's real chat template does, byte for byte.

Oracles: the published templates copied under models/families/templates/ with their source
headers (Google's canonical Gemma 4 templates, small and large; GLM-Z1-0414's; Qwen3's;
SmolLM2's ChatML), rendered by transformers' own chat-template code (`apply_chat_template`).
"""

from __future__ import annotations

import pytest

from nudgeability.models.families import detect_family, get_family
from nudgeability.models.testing.tiny_tokenizers import chat_template, tiny_tokenizer

SMALL = {"model_type": "gemma4", "text_config": {"hidden_size_per_layer_input": 256}}
LARGE = {"model_type": "gemma4", "text_config": {"hidden_size_per_layer_input": 0}}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search a scoped index.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to find."},
                "mode": {"type": "string", "enum": ["fast", "full"], "nullable": True},
                "limit": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "filter": {
                    "type": "object",
                    "description": "Restrict hits.",
                    "properties": {"year": {"type": "integer", "description": "Year."}},
                    "required": ["year"],
                },
            },
            "required": ["query"],
        },
    },
}
RESULTS = (
    "Emma is a novel by Jane Austen.",
    "Line one.\nLine two: 1815 — “Emma”.",
    "  padded result  ",
)


def _call(name="retrieve", query="Emma", call_id=None):
    call = {"type": "function", "function": {"name": name, "arguments": {"query": query}}}
    if call_id:
        call["id"] = call_id
    return call


def _conversations(tool):
    system = {"role": "system", "content": "You answer questions."}
    user = {"role": "user", "content": "Who wrote Emma?"}
    asked = {"role": "assistant", "content": "", "tool_calls": [_call()]}
    answered = {"role": "assistant", "content": "Jane Austen.", "reasoning_content": "It says so."}
    return [
        ([system, user], [tool]),
        ([user], [tool]),
        ([system, user], [tool, SEARCH]),
        ([system, user], None),
        ([user], None),
        ([system, user, asked, {"role": "tool", "content": RESULTS[0]}], [tool]),
        ([user, asked, {"role": "tool", "content": RESULTS[1]}], [tool, SEARCH]),
        (
            [
                system,
                user,
                {"role": "assistant", "content": "", "tool_calls": [_call(call_id="c1")]},
                {"role": "tool", "content": RESULTS[0], "tool_call_id": "c1"},
                answered,
                {"role": "user", "content": "And when?"},
            ],
            [tool],
        ),
    ]


def _real(tokenizer, template_file, messages, tools, thinking):
    return tokenizer.apply_chat_template(
        messages,
        tools=tools,
        add_generation_prompt=True,
        tokenize=False,
        enable_thinking=thinking,
        chat_template=chat_template(template_file),
    )


@pytest.mark.parametrize(
    "config,template", [(SMALL, "gemma4_e2b.jinja"), (LARGE, "gemma4_31b.jinja")]
)
@pytest.mark.parametrize("thinking", [True, False])
def test_gemma4_renderer_matches_googles_canonical_template(
    retrieve_tool, config, template, thinking
):
    fam = get_family("gemma4", tiny_tokenizer("gemma4"), config)
    for messages, tools in _conversations(retrieve_tool):
        expected = _real(fam.tokenizer, template, messages, tools, thinking)
        assert fam.own_text(messages, tools, thinking) == expected, (messages, tools)


def test_gemma4_size_rule_reads_per_layer_embeddings(tmp_path):
    tok = tiny_tokenizer("gemma4")
    assert not detect_family(SMALL, tok).large
    assert detect_family(LARGE, tok).large
    assert detect_family({"model_type": "gemma4_text"}, tok).large  # no per-layer inputs
    assert not get_family("gemma4", tok).large  # no config known: the small template


def _z1_native(messages):
    """The same conversation in the shapes GLM-Z1's template reads: a call is an assistant message
    whose `metadata` names the function and whose content is the arguments JSON; a tool result is
    an `observation`."""
    out = []
    for message in messages:
        if message.get("tool_calls"):
            fn = message["tool_calls"][0]["function"]
            out.append(
                {"role": "assistant", "metadata": fn["name"], "content": '{"query": "Emma"}'}
            )
        elif message["role"] == "tool":
            out.append({"role": "observation", "content": message["content"]})
        else:
            out.append({k: v for k, v in message.items() if k != "reasoning_content"})
    return out


@pytest.mark.parametrize("thinking", [True, False])
def test_glm_z1_renderer_matches_the_real_template(retrieve_tool, thinking):
    fam = get_family("glm_z1", tiny_tokenizer("glm_z1"))
    for messages, tools in _conversations(retrieve_tool):
        expected = _real(fam.tokenizer, "glm_z1.jinja", _z1_native(messages), tools, thinking)
        assert fam.own_text(messages, tools, thinking) == expected
        assert fam.own_text(_z1_native(messages), tools, thinking) == expected
    assert expected.endswith("<|assistant|>\n<think>")  # no thinking switch


def test_glm_z1_declares_tools_after_its_default_system_paragraph(retrieve_tool):
    text = get_family("glm_z1", tiny_tokenizer("glm_z1")).own_text(
        [{"role": "user", "content": "hi"}], [retrieve_tool]
    )
    assert text.startswith("[gMASK]<sop><|system|>\n你是一个名为 ChatGLM 的人工智能助手。")
    assert "支持。\n\n# 可用工具\n## retrieve\n\n{\n" in text


def test_qwen3_renderer_matches_the_guarded_qwen3_template(retrieve_tool):
    fam = get_family("qwen3", tiny_tokenizer("qwen3"))
    for messages, tools in _conversations(retrieve_tool):
        for thinking in (True, False):
            expected = _real(fam.tokenizer, "qwen3_guarded.jinja", messages, tools, thinking)
            assert fam.own_text(messages, tools, thinking) == expected


# ----- the tool-result turn (the resolution phase's continuation) ---------------------------------
def _assistant_call(family_name):
    """The assistant message holding one `retrieve` call, as each real template takes it, and the
    text that ends the call in the rendering."""
    if family_name == "glm_z1":
        return {"role": "assistant", "metadata": "retrieve", "content": '{"query": "Emma"}'}, (
            '{"query": "Emma"}'
        )
    if family_name == "chatml":  # SmolLM2's template renders content only: the call is text
        call = '<tool_call>\n{"name": "retrieve", "arguments": {"query": "Emma"}}\n</tool_call>'
        return {"role": "assistant", "content": call}, "</tool_call>"
    close = {"qwen3": "</tool_call>", "gemma4": "<tool_call|>"}[family_name]
    return {"role": "assistant", "content": "", "tool_calls": [_call()]}, close


TOOL_RESULT_TEMPLATES = {
    "qwen3": "qwen3_guarded.jinja",
    "gemma4": "gemma4_e2b.jinja",
    "glm_z1": "glm_z1.jinja",
    "chatml": "smollm2.jinja",
}
# What ChatML adds after SmolLM2's own `<|im_start|>assistant\n`: its think opener (chatml.py).
CHATML_HEADER_SUFFIX = {True: "<think>\n", False: "<think>\n\n</think>\n\n"}


@pytest.mark.parametrize("name", sorted(TOOL_RESULT_TEMPLATES))
@pytest.mark.parametrize("thinking", [True, False])
@pytest.mark.parametrize("result", RESULTS)
@pytest.mark.parametrize("with_system", [True, False])
def test_tool_result_turn_is_what_the_real_template_writes_after_the_call(
    retrieve_tool, name, thinking, result, with_system
):
    fam = get_family(name, tiny_tokenizer(name))
    assistant, call_close = _assistant_call(name)
    messages = [{"role": "system", "content": "Be brief."}] * with_system + [
        {"role": "user", "content": "Who wrote Emma?"},
        assistant,
        {"role": "observation" if name == "glm_z1" else "tool", "content": result},
    ]
    real = _real(fam.tokenizer, TOOL_RESULT_TEMPLATES[name], messages, [retrieve_tool], thinking)
    tail = real[real.rindex(call_close) + len(call_close) :]
    if name == "chatml":
        tail += CHATML_HEADER_SUFFIX[thinking]
    assert fam.render_tool_result("retrieve", result, thinking) == tail


def test_gemma4_tool_result_stays_inside_the_model_turn():
    fam = get_family("gemma4", tiny_tokenizer("gemma4"))
    assert fam.render_tool_result("retrieve", "X") == (
        '<|tool_response>response:retrieve{value:<|"|>X<|"|>}<tool_response|><|channel>thought\n'
    )


def _exchange(head: list[dict], reasoning: str, result: str) -> list[dict]:
    """`head`, then an assistant turn that reasons and calls `retrieve`, then the tool's result: the
    whole exchange as the real templates take it."""
    called = {"role": "assistant", "content": "", "reasoning_content": reasoning}
    return head + [called | {"tool_calls": [_call()]}, {"role": "tool", "content": result}]


@pytest.mark.parametrize("thinking", [True, False])
def test_qwen3_resolution_prompt_equals_the_template_rendering_of_the_whole_exchange(
    retrieve_tool, thinking
):
    """Prompt + a generation that reasons and calls, cut after the call, + the tool-result turn is
    exactly the real template's rendering of [system, user, assistant(reasoning, call), tool]."""
    fam = get_family("qwen3", tiny_tokenizer("qwen3"))
    head = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Who wrote Emma?"},
    ]
    prompt = fam.render(head, [retrieve_tool])
    generated = fam.encode(
        "<think>\nI should look it up.\n</think>\n\n<tool_call>\n"
        '{"name": "retrieve", "arguments": {"query": "Emma"}}\n</tool_call><|im_end|>'
    )
    full = prompt + fam.continuation_ids(generated, "retrieve", RESULTS[0], thinking)
    messages = _exchange(head, "I should look it up.", RESULTS[0])
    assert fam.decode(full) == _real(
        fam.tokenizer, "qwen3_guarded.jinja", messages, [retrieve_tool], thinking
    )


def test_gemma4_resolution_prompt_equals_the_template_rendering_of_the_whole_exchange(
    retrieve_tool,
):
    fam = get_family("gemma4", tiny_tokenizer("gemma4"))
    head = [{"role": "user", "content": "Who wrote Emma?"}]
    prompt = fam.render(head, [retrieve_tool])
    generated = fam.encode(
        '<|channel>thought\nLook it up.\n<channel|><|tool_call>call:retrieve{query:<|"|>Emma<|"|>}'
        "<tool_call|><|tool_response>"
    )
    full = prompt + fam.continuation_ids(generated, "retrieve", RESULTS[1])
    messages = _exchange(head, "Look it up.", RESULTS[1])
    assert fam.decode(full) == _real(
        fam.tokenizer, "gemma4_e2b.jinja", messages, [retrieve_tool], True
    )


@pytest.mark.parametrize(
    "name,commitment,kept",
    [
        (
            "glm_z1",
            'x</think>\nretrieve\n{"query": "Emma"}<|observation|>',
            'x</think>\nretrieve\n{"query": "Emma"}',
        ),
        (
            "chatml",
            'x</think>\n<tool_call>\n{"name": "retrieve", "arguments": {}}\n</tool_call>\nok',
            'x</think>\n<tool_call>\n{"name": "retrieve", "arguments": {}}\n</tool_call>',
        ),
    ],
)
def test_continuation_cuts_right_after_the_first_call(name, commitment, kept):
    fam = get_family(name, tiny_tokenizer(name))
    ids = fam.continuation_ids(fam.encode(commitment), "retrieve", "R")
    assert fam.decode(ids) == kept + fam.render_tool_result("retrieve", "R")
