"""GLM-Z1-0414 (GLM-4 architecture): `[gMASK]<sop>`, role tokens, name-then-JSON tool calls.

Format (models/README.md, "GLM-Z1"; the real template is models/families/templates/glm_z1.jinja):
the prompt starts with `[gMASK]<sop>`; turns are `<|system|>\\n…`, `<|user|>\\n…`,
`<|assistant|>\\n…` and `<|observation|>\\n…` (tool results), with no end-of-turn marker between
them. Tools are declared in a system turn of their own: Z1's default system paragraph, then
`# 可用工具`, each tool as `## {name}` followed by its function JSON (indent 4) and an instruction
line. The generation prompt is always `<|assistant|>\\n<think>` (Z1 has no thinking switch): the
model starts inside the thinking block and writes `</think>` and then the answer. A call has no
wrapper: the function name on its own line, then a JSON object of arguments
(`retrieve\\n{"query": "…"}`), sometimes with `<|assistant|>` before the name; generation then
stops at `<|observation|>`.

Whether `<think>`/`</think>` are single tokens in Z1's vocabulary is unverified, so every search
works on text and handles multi-token markers. Splice: "\\n" + sentence + "\\n", then the
think-close ids (one or several tokens) when sealed.
"""

from __future__ import annotations

import json
import re

from nudgeability.models.families.base import CallScan, Family, ParsedCall

# The default system paragraph that Z1's template writes before the tools (GLM-4-0414 *chat*'s
# template has no such paragraph).
DEFAULT_SYSTEM = (
    "你是一个名为 ChatGLM 的人工智能助手。你是基于智谱 AI 公司训练的语言模型 GLM-4 模型开发的，"
    "你的任务是针对用户的问题和要求提供适当的答复和支持。"
)
TOOLS_HEADER = "<|system|>\n" + DEFAULT_SYSTEM + "\n\n# 可用工具"
GENERATION_PROMPT = "<|assistant|>\n<think>"
TOOL_INSTRUCTION = "在调用上述函数时，请使用 Json 格式表示调用的参数。"
# A call: a bare function name on its own line, then a line that opens a JSON object.
_CALL_HEAD = re.compile(r"(?m)^[ \t]*([A-Za-z_][\w.\-]*)[ \t]*\n[ \t]*\{")


def _visible(content: str) -> str:
    """What GLM-Z1's template keeps of a turn: the text after any reasoning, stripped."""
    return content.split("</think>")[-1].strip()


def matching_brace(text: str, start: int) -> int | None:
    """Index of the `}` that closes the `{` at `start`, skipping JSON strings; None if unbalanced."""
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


class GlmZ1Family(Family):
    name = "glm_z1"
    think_open_text = "<think>"
    think_close_text = "</think>"
    stop_texts = ("<|endoftext|>", "<|user|>", "<|observation|>")
    end_of_turn_texts = ("<|endoftext|>", "<|user|>", "<|observation|>", "<|system|>")
    commitment_gap = "\n"  # unverified on the real checkpoint, like the think markers

    def call_opener(self, tool_name: str) -> str:
        """A call has no wrapper: it opens with the name on its own line and the JSON's brace."""
        return tool_name + "\n{"

    def own_text(
        self, messages: list[dict], tools: list[dict] | None = None, thinking: bool = True
    ) -> str:
        """GLM-Z1-0414's template (models/families/templates/glm_z1.jinja), byte for byte.

        Z1 has no thinking switch: `thinking` is ignored and the prompt always ends
        `<|assistant|>\\n<think>`. Beyond the template's own message shapes (`metadata` naming a
        called function, `observation` results) it takes the OpenAI shapes the project uses: each
        of an assistant message's `tool_calls` becomes `<|assistant|>NAME\\n{arguments JSON}`, and
        a `tool` message is an `observation` (the real template would drop it).
        """
        out = ["[gMASK]<sop>"]
        if tools:
            out.append(TOOLS_HEADER)
            for tool in tools:
                fn = tool.get("function") or tool
                out.append(
                    f"\n## {fn['name']}\n\n{json.dumps(fn, ensure_ascii=False, indent=4)}\n"
                    + TOOL_INSTRUCTION
                )
        out.extend("<|system|>\n" + m["content"] for m in messages if m["role"] == "system")
        for message in messages:
            role, visible = message["role"], _visible(message["content"])
            if role == "user":
                out.append("<|user|>\n" + visible)
            elif role == "assistant" and message.get("metadata"):
                out.append(f"<|assistant|>{message['metadata']}\n{visible}")
            elif role == "assistant":
                if visible or not message.get("tool_calls"):
                    out.append("<|assistant|>\n" + visible)
                for call in message.get("tool_calls") or ():
                    fn = call.get("function", call)
                    args = (
                        fn["arguments"]
                        if isinstance(fn["arguments"], str)
                        else json.dumps(fn["arguments"], ensure_ascii=False)
                    )
                    out.append(f"<|assistant|>{fn['name']}\n{args}")
            elif role in ("tool", "observation"):
                out.append("<|observation|>\n" + visible)
        out.append(GENERATION_PROMPT)
        return "".join(out)

    def render_tool_result(self, name: str, result: str, thinking: bool = True) -> str:
        """`<|observation|>\\n{result}<|assistant|>\\n<think>`: the template strips the result and
        keeps only what follows a `</think>` in it; no thinking switch."""
        return "<|observation|>\n" + _visible(result) + GENERATION_PROMPT

    def scan_calls(self, text: str) -> CallScan:
        """Name-then-JSON calls. `<|assistant|>` anywhere is read as a line break (so it may precede a
        name, and never counts as answer text). A JSON object that never closes runs to the end of
        the text and sets `open_call`. A code-fenced block is never a call (its opening line is
        "```json", not a bare name)."""
        # Same length as the marker, so offsets (ParsedCall.end) stay those of `text`.
        text = text.replace("<|assistant|>", "\n" + " " * (len("<|assistant|>") - 1))
        scan, pos, residual = CallScan(), 0, []
        decoder = json.JSONDecoder()
        while (match := _CALL_HEAD.search(text, pos)) is not None:
            residual.append(text[pos : match.start()])
            brace = match.end() - 1
            try:
                obj, pos = decoder.raw_decode(text, brace)
                scan.calls.append(
                    ParsedCall(match.group(1), obj if isinstance(obj, dict) else None, end=pos)
                )
            except ValueError:
                close = matching_brace(text, brace)
                if close is None:
                    scan.calls.append(ParsedCall(match.group(1), None))
                    scan.open_call, pos = True, len(text)
                else:
                    pos = close + 1
                    scan.calls.append(ParsedCall(match.group(1), None, end=pos))
        residual.append(text[pos:])
        scan.residual = "".join(residual)
        return scan
