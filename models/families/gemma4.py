"""Gemma 4: `<|turn>` turns, thinking in `<|channel>thought … <channel|>`, `<|tool_call>` calls.

Format (formats.md section 1, from llama.cpp's models/templates/gemma4.jinja): the prompt starts
with BOS; turns are `<|turn>{system|user|model}\\n…<turn|>\\n`; the generation prompt is
`<|turn>model\\n`. With thinking on, `<|think|>` opens the system turn and the model writes
`<|channel>thought\\n…<channel|>`, then the answer and `<turn|>`; with thinking off the generation
prompt pre-fills `<|channel>thought\\n<channel|>`. Tools are declared in the system turn as
`<|tool>declaration:NAME{description:<|"|>…<|"|>,parameters:{…}}<tool|>`, every string wrapped in
`<|"|>`. A call is `<|tool_call>call:NAME{key:<|"|>value<|"|>}<tool_call|>`.

The think-close marker is `<channel|>`. Splice: "\\n" + sentence + "\\n", then `<channel|>` when
sealed.
"""

from __future__ import annotations

import json
import re

from nudgeability.models.families.base import CallScan, Family, ParsedCall

Q = '<|"|>'  # Gemma 4's string quote
_STANDARD_KEYS = ("description", "type", "properties", "required", "nullable")
_CALL_NAME = re.compile(r"\s*call\s*:\s*([A-Za-z_][\w.\-]*)\s*")
_BARE_KEY = re.compile(r"[A-Za-z_][\w.\-]*")
_SCALAR = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")


def format_argument(value, escape_keys: bool = True) -> str:
    """A value in Gemma 4's argument syntax: strings in `<|"|>`, keys sorted."""
    if isinstance(value, str):
        return Q + value + Q
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        items = (
            (Q + k + Q if escape_keys else k) + ":" + format_argument(v, escape_keys)
            for k, v in sorted(value.items())
        )
        return "{" + ",".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_argument(v, escape_keys) for v in value) + "]"
    return str(value)


def _format_parameters(properties: dict) -> str:
    """JSON-schema properties in the declaration syntax of Gemma 4's template (including its
    unconditional comma before `properties:`/`items:` of nested objects and arrays)."""
    fields = []
    for key, value in sorted(properties.items()):
        if key in _STANDARD_KEYS:
            continue
        parts, comma = [], False
        if value.get("description"):
            parts.append(f"description:{Q}{value['description']}{Q}")
            comma = True
        if value.get("nullable"):
            parts.append(("," if comma else "") + "nullable:true")
            comma = True
        vtype = value.get("type", "")
        vtype = (vtype if isinstance(vtype, str) else vtype[0]).upper()
        if vtype == "STRING" and value.get("enum"):
            parts.append(("," if comma else "") + "enum:" + format_argument(value["enum"]))
            comma = True
        elif vtype == "OBJECT":
            parts.append(",properties:{" + _format_parameters(value.get("properties") or {}) + "}")
            if value.get("required"):
                parts.append(",required:[" + ",".join(Q + r + Q for r in value["required"]) + "]")
        elif vtype == "ARRAY" and isinstance(value.get("items"), dict) and value["items"]:
            parts.append(",items:{" + _format_items(value["items"]) + "}")
        parts.append(("," if comma else "") + f"type:{Q}{vtype}{Q}}}")
        fields.append(key + ":{" + "".join(parts))
    return ",".join(fields)


def _format_items(items: dict) -> str:
    out = []
    for key, value in sorted(items.items()):
        if value is None:
            continue
        if key == "properties":
            out.append(
                "properties:{"
                + (_format_parameters(value) if isinstance(value, dict) else "")
                + "}"
            )
        elif key == "required":
            out.append("required:[" + ",".join(Q + r + Q for r in value) + "]")
        elif key == "type":
            out.append(
                "type:"
                + format_argument(
                    value.upper() if isinstance(value, str) else [v.upper() for v in value]
                )
            )
        else:
            out.append(key + ":" + format_argument(value))
    return ",".join(out)


def format_declaration(tool: dict) -> str:
    """`declaration:NAME{description:…,parameters:{…}}` for one OpenAI-style tool."""
    fn = tool.get("function", tool)
    out = f"declaration:{fn['name']}{{description:{Q}{fn.get('description', '')}{Q}"
    params = fn.get("parameters")
    if params:
        out += ",parameters:{"
        if params.get("properties"):
            out += "properties:{" + _format_parameters(params["properties"]) + "},"
        if params.get("required"):
            out += "required:[" + ",".join(Q + r + Q for r in params["required"]) + "],"
        if params.get("type"):
            out += f"type:{Q}{params['type'].upper()}{Q}}}"
    return (out + "}").strip()


def _strip_thinking(text: str) -> str:
    return "".join(part.split("<|channel>")[0] for part in text.split("<channel|>")).strip()


def parse_value(text: str, i: int):
    """Read one value in Gemma 4's argument syntax at `text[i:]`; return (value, end index).

    Accepts `<|"|>`-quoted and JSON-quoted strings, bare or quoted keys, numbers, true/false/null,
    objects and arrays. Raises ValueError on anything else.
    """
    i = _skip_ws(text, i)
    if text.startswith(Q, i):
        end = text.find(Q, i + len(Q))
        if end < 0:
            raise ValueError('unterminated <|"|> string')
        return text[i + len(Q) : end], end + len(Q)
    if i >= len(text):
        raise ValueError("value expected")
    if text[i] == '"':
        return json.JSONDecoder().raw_decode(text, i)
    if text[i] in "{[":
        closer, container = ("}", {}) if text[i] == "{" else ("]", [])
        i = _skip_ws(text, i + 1)
        while not text.startswith(closer, i):
            if isinstance(container, dict):
                key, i = _parse_key(text, i)
                i = _skip_ws(text, i)
                if not text.startswith(":", i):
                    raise ValueError(f"':' expected at {i}")
                container[key], i = parse_value(text, i + 1)
            else:
                item, i = parse_value(text, i)
                container.append(item)
            i = _skip_ws(text, i)
            if text.startswith(",", i):
                i = _skip_ws(text, i + 1)
            elif not text.startswith(closer, i):
                raise ValueError(f"',' or '{closer}' expected at {i}")
        return container, i + 1
    match = _SCALAR.match(text, i)
    if match is None:
        raise ValueError(f"value expected at {i}")
    return json.loads(match.group(0)), match.end()


def _parse_key(text: str, i: int) -> tuple[str, int]:
    if text.startswith(Q, i) or text.startswith('"', i):
        key, end = parse_value(text, i)
        return key, end
    match = _BARE_KEY.match(text, i)
    if match is None:
        raise ValueError(f"key expected at {i}")
    return match.group(0), match.end()


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def parse_gemma_call(body: str) -> ParsedCall:
    """Read `call:NAME{…}` (the text between `<|tool_call>` and `<tool_call|>`)."""
    match = _CALL_NAME.match(body)
    if match is None:
        return ParsedCall(None, None)
    try:
        args, end = parse_value(body, match.end())
    except ValueError:
        return ParsedCall(match.group(1), None)
    if not isinstance(args, dict) or body[end:].strip():
        return ParsedCall(match.group(1), None)
    return ParsedCall(match.group(1), args)


class Gemma4Family(Family):
    name = "gemma4"
    think_open_text = "<|channel>"
    think_close_text = "<channel|>"
    stop_texts = ("<turn|>", "<eos>", "<tool_call|>", "<|tool_response>")
    end_of_turn_texts = ("<turn|>", "<eos>", "<|tool_response>", "<|turn>")

    def own_text(
        self, messages: list[dict], tools: list[dict] | None = None, thinking: bool = True
    ) -> str:
        """Gemma 4's format, following the published template for system, user, model (with tool
        calls) and tool turns."""
        out = [self.tokenizer.bos_token or ""]
        rest = messages
        if thinking or tools or messages[0]["role"] == "system":
            out.append("<|turn>system\n" + ("<|think|>" if thinking else ""))
            if messages[0]["role"] == "system":
                out.append(messages[0]["content"].strip())
                rest = messages[1:]
            out.extend("<|tool>" + format_declaration(tool) + "<tool|>" for tool in tools or ())
            out.append("<turn|>\n")
        for message in rest:
            role = "model" if message["role"] == "assistant" else message["role"]
            out.append(f"<|turn>{role}\n")
            for call in message.get("tool_calls") or ():
                fn = call.get("function", call)
                args = fn["arguments"]
                if isinstance(args, dict):
                    args = ",".join(
                        k + ":" + format_argument(v, escape_keys=False)
                        for k, v in sorted(args.items())
                    )
                out.append(f"<|tool_call>call:{fn['name']}{{{args}}}<tool_call|>")
            content = message["content"]
            out.append(_strip_thinking(content) if role == "model" else content.strip())
            out.append("<turn|>\n")
        out.append("<|turn>model\n" + ("" if thinking else "<|channel>thought\n<channel|>"))
        return "".join(out)

    def scan_calls(self, text: str) -> CallScan:
        """`<|tool_call>call:NAME{…}<tool_call|>` spans; an unclosed one runs to the end of the text."""
        scan, pos, residual = CallScan(), 0, []
        while (start := text.find("<|tool_call>", pos)) >= 0:
            residual.append(text[pos:start])
            body_start = start + len("<|tool_call>")
            end = text.find("<tool_call|>", body_start)
            if end < 0:
                scan.calls.append(parse_gemma_call(text[body_start:]))
                scan.open_call, pos = True, len(text)
                break
            scan.calls.append(parse_gemma_call(text[body_start:end]))
            pos = end + len("<tool_call|>")
        residual.append(text[pos:])
        scan.residual = "".join(residual)
        return scan
