"""The chat backend writes a chat answer's tool calls back in the family's own format, asking the
family (`Family.render_tool_call`), and only the families that have one take `--api chat`."""

from __future__ import annotations

from types import SimpleNamespace

from nudgeability.backends.chat import CHAT_FAMILIES, ChatBackend
from nudgeability.models.families import FAMILIES


def test_the_chat_families_are_those_that_write_tool_calls_back():
    assert CHAT_FAMILIES == ("chatml", "qwen3")
    assert not FAMILIES["gemma4"].writes_tool_calls() and not FAMILIES["glm_z1"].writes_tool_calls()


def test_a_base_answer_s_calls_are_written_by_the_family():
    calls = []

    def render_tool_call(call):
        calls.append(call)
        return f"<call {call['function']['name']}>"

    backend = ChatBackend.__new__(ChatBackend)  # only the family is read: no server needed
    backend.family = SimpleNamespace(
        think_open_text="<t>", think_close_text="</t>", render_tool_call=render_tool_call
    )
    call = {"type": "function", "function": {"name": "retrieve", "arguments": '{"query": "x"}'}}
    message = {"reasoning_content": " why ", "tool_calls": [call, call]}
    assert backend._base_text(message, "") == "why\n</t>\n<call retrieve>\n<call retrieve>"
    assert calls == [call, call]


def test_qwen3_writes_a_call_as_its_template_does():
    """The text the Qwen3 chat template writes for an assistant tool call (its `tool_call` block)."""
    family = FAMILIES["qwen3"].__new__(FAMILIES["qwen3"])
    call = {"function": {"name": "retrieve", "arguments": {"query": "Paris"}}}
    assert family.render_tool_call(call) == (
        '<tool_call>\n{"name": "retrieve", "arguments": {"query": "Paris"}}\n</tool_call>'
    )
