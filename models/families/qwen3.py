"""Qwen3: `<think>` tags, tools declared in the system turn, calls as `<tool_call>` JSON.

Format (models/README.md, "Qwen3"; the real template is models/families/templates/qwen3.jinja):
turns are `<|im_start|>{role}\\n…<|im_end|>\\n`; the generation prompt is `<|im_start|>assistant\\n`
and the model opens `<think>` itself. Tools go in the system turn as a `# Tools` section with one
JSON signature per line inside `<tools></tools>`. A call is
`<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>`, then `<|im_end|>`.

Splice: the sentence is inserted as "\\n" + sentence + "\\n" (its own paragraph; the reasoning prefix
usually ends with a newline already), and the sealed variant appends the single `</think>` token.
"""

from __future__ import annotations

import json
import re

from nudgeability.models.families.base import CallScan, Family, ParsedCall

TOOLS_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call>"
)
_NAME_IN_BROKEN_JSON = re.compile(r'"name"\s*:\s*"([^"\\]+)"')


def tojson(value) -> str:
    """JSON exactly as transformers' chat-template `tojson` filter writes it."""
    return json.dumps(value, ensure_ascii=False)


def parse_json_call(body: str) -> ParsedCall:
    """Read `{"name": …, "arguments": {…}}` (arguments may also be a JSON string of an object).

    When the JSON is broken but a `"name": "…"` pair is visible, the name is still returned so that
    the caller can tell an undeclared name from unreadable arguments.
    """
    body = body.strip()
    try:
        obj, end = json.JSONDecoder().raw_decode(body)
    except ValueError:
        match = _NAME_IN_BROKEN_JSON.search(body)
        return ParsedCall(match.group(1) if match else None, None)
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"].strip():
        return ParsedCall(None, None)
    name = obj["name"].strip()
    if body[end:].strip():
        return ParsedCall(name, None)
    args = obj.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return ParsedCall(name, None)
    return ParsedCall(name, args if isinstance(args, dict) else None)


def scan_tagged_json_calls(
    text: str, open_tag: str = "<tool_call>", close_tag: str = "</tool_call>"
) -> CallScan:
    """Every `open_tag … close_tag` span in `text`, each read with `parse_json_call`.

    A call opened and never closed takes the rest of the text as its body (a stop string may have
    consumed the close tag) and sets `open_call`.
    """
    scan, pos, residual = CallScan(), 0, []
    while True:
        start = text.find(open_tag, pos)
        if start < 0:
            residual.append(text[pos:])
            break
        residual.append(text[pos:start])
        body_start = start + len(open_tag)
        end = text.find(close_tag, body_start)
        if end < 0:
            scan.calls.append(parse_json_call(text[body_start:]))
            scan.open_call = True
            break
        pos = end + len(close_tag)
        call = parse_json_call(text[body_start:end])
        call.end = pos
        scan.calls.append(call)
    scan.residual = "".join(residual)
    return scan


def render_tool_call(call: dict) -> str:
    """One assistant tool call as Qwen3 writes it."""
    fn = call.get("function", call)
    args = fn["arguments"] if isinstance(fn["arguments"], str) else tojson(fn["arguments"])
    return '<tool_call>\n{"name": "' + fn["name"] + '", "arguments": ' + args + "}\n</tool_call>"


class Qwen3Family(Family):
    name = "qwen3"
    think_open_text = "<think>"
    think_close_text = "</think>"
    stop_texts = ("<|im_end|>", "<|endoftext|>", "</tool_call>")
    end_of_turn_texts = ("<|im_end|>", "<|endoftext|>", "<|im_start|>")

    def render_tool_call(self, call: dict) -> str:
        return render_tool_call(call)

    def own_text(
        self, messages: list[dict], tools: list[dict] | None = None, thinking: bool = True
    ) -> str:
        """Qwen3's format, written to give the same text as the real template for system, user,
        assistant (with reasoning and tool calls) and tool messages."""
        out = []
        has_system = messages[0]["role"] == "system"
        if tools:
            out.append("<|im_start|>system\n")
            if has_system:
                out.append(messages[0]["content"] + "\n\n")
            out.append(
                TOOLS_HEADER
                + "".join("\n" + tojson(t) for t in tools)
                + TOOLS_FOOTER
                + "<|im_end|>\n"
            )
        elif has_system:
            out.append("<|im_start|>system\n" + messages[0]["content"] + "<|im_end|>\n")
        last_query = _last_query_index(messages)
        for i, message in enumerate(messages):
            role, content = message["role"], message["content"]
            if role == "user" or (role == "system" and i > 0):
                out.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
            elif role == "assistant":
                out.append(_assistant_turn(message, i, i == len(messages) - 1, last_query))
            elif role in ("tool", "observation"):
                if i == 0 or messages[i - 1]["role"] not in ("tool", "observation"):
                    out.append("<|im_start|>user")
                out.append("\n<tool_response>\n" + content + "\n</tool_response>")
                if i == len(messages) - 1 or messages[i + 1]["role"] not in ("tool", "observation"):
                    out.append("<|im_end|>\n")
        out.append("<|im_start|>assistant\n")
        if not thinking:
            out.append("<think>\n\n</think>\n\n")
        return "".join(out)

    def render_tool_result(self, name: str, result: str, thinking: bool = True) -> str:
        """`<|im_end|>`, then the result as a user turn wrapped in `<tool_response>` tags, then
        the assistant header (with the empty think block when thinking is off). Qwen3's template
        does not name the tool in the result turn."""
        return (
            "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
            + result
            + "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
            + ("" if thinking else "<think>\n\n</think>\n\n")
        )

    def scan_calls(self, text: str) -> CallScan:
        return scan_tagged_json_calls(text)


def _last_query_index(messages: list[dict]) -> int:
    """Index of the last user turn that is not a wrapped tool response (the real template's rule)."""
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i]["content"]
        wrapped = content.startswith("<tool_response>") and content.endswith("</tool_response>")
        if messages[i]["role"] == "user" and not wrapped:
            return i
    return len(messages) - 1


def _assistant_turn(message: dict, index: int, is_last: bool, last_query: int) -> str:
    content, reasoning = message["content"], message.get("reasoning_content")
    if reasoning is None:
        reasoning = ""
        if "</think>" in content:
            reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
            content = content.split("</think>")[-1].lstrip("\n")
    if index > last_query and (is_last or reasoning):
        text = (
            "<|im_start|>assistant\n<think>\n"
            + reasoning.strip("\n")
            + "\n</think>\n\n"
            + content.lstrip("\n")
        )
    else:
        text = "<|im_start|>assistant\n" + content
    for j, call in enumerate(message.get("tool_calls") or ()):
        if (j == 0 and content) or j > 0:
            text += "\n"
        text += render_tool_call(call)
    return text + "<|im_end|>\n"
