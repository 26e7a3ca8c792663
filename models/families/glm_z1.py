"""GLM-Z1-0414 (GLM-4 architecture): `[gMASK]<sop>`, role tokens, name-then-JSON tool calls.

Format (formats.md section 1): the prompt starts with `[gMASK]<sop>`; turns are `<|system|>\\n…`,
`<|user|>\\n…`, `<|assistant|>\\n…` and `<|observation|>\\n…` (tool results), with no end-of-turn
marker between them. Tools are declared in a system turn of their own under `# 可用工具`, each as
`## {name}` followed by its function JSON (indent 4) and the instruction line that GLM-4-0414's
template adds. The generation prompt is `<|assistant|>\\n<think>`: the model starts inside the
thinking block and writes `</think>` and then the answer. A call has no wrapper: the function name
on its own line, then a JSON object of arguments (`retrieve\\n{"query": "…"}`), sometimes with
`<|assistant|>` before the name; generation then stops at `<|observation|>`.

Whether `<think>`/`</think>` are single tokens in Z1's vocabulary is unverified, so every search
works on text and handles multi-token markers. Splice: "\\n" + sentence + "\\n", then the
think-close ids (one or several tokens) when sealed.
"""

from __future__ import annotations

import json
import re

from nudgeability.models.families.base import CallScan, Family, ParsedCall

TOOLS_HEADER = "<|system|>\n# 可用工具\n"
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

    def own_text(
        self, messages: list[dict], tools: list[dict] | None = None, thinking: bool = True
    ) -> str:
        """GLM-Z1's format. With thinking off (no documented Z1 switch), the generation prompt
        pre-fills an empty block, `<|assistant|>\\n<think></think>`, as Qwen3 and Gemma 4 do."""
        out = ["[gMASK]<sop>"]
        if tools:
            out.append(TOOLS_HEADER)
            for tool in tools:
                fn = tool.get("function", tool)
                out.append(
                    f"\n## {fn['name']}\n\n{json.dumps(fn, ensure_ascii=False, indent=4)}\n{TOOL_INSTRUCTION}"
                )
        out.extend("<|system|>\n" + m["content"] for m in messages if m["role"] == "system")
        for message in messages:
            role, visible = message["role"], _visible(message["content"])
            if role == "user":
                out.append("<|user|>\n" + visible)
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
        out.append("<|assistant|>\n<think>" if thinking else "<|assistant|>\n<think></think>")
        return "".join(out)

    def scan_calls(self, text: str) -> CallScan:
        """Name-then-JSON calls. `<|assistant|>` anywhere is read as a line break (so it may precede a
        name, and never counts as answer text). A JSON object that never closes runs to the end of
        the text and sets `open_call`."""
        text = text.replace("<|assistant|>", "\n")
        scan, pos, residual = CallScan(), 0, []
        decoder = json.JSONDecoder()
        while (match := _CALL_HEAD.search(text, pos)) is not None:
            residual.append(text[pos : match.start()])
            brace = match.end() - 1
            try:
                obj, pos = decoder.raw_decode(text, brace)
                scan.calls.append(
                    ParsedCall(match.group(1), obj if isinstance(obj, dict) else None)
                )
            except ValueError:
                close = matching_brace(text, brace)
                scan.calls.append(ParsedCall(match.group(1), None))
                if close is None:
                    scan.open_call, pos = True, len(text)
                else:
                    pos = close + 1
        residual.append(text[pos:])
        scan.residual = "".join(residual)
        return scan
