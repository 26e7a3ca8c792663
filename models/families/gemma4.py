"""Gemma 4: `<|turn>` turns, thinking in `<|channel>thought … <channel|>`, `<|tool_call>` calls.

Format (models/README.md, "Gemma 4"; the real templates are models/families/templates/
gemma4_e2b.jinja and gemma4_31b.jinja, Google's canonical ones): the prompt starts with BOS; turns
are `<|turn>{system|user|model}\\n…<turn|>\\n`; the generation prompt is `<|turn>model\\n`. With
thinking on, `<|think|>\\n` opens the system turn and the model writes
`<|channel>thought\\n…<channel|>`, then the answer and `<turn|>`. With thinking off the small
models' template ends at `<|turn>model\\n`, while the large ones' pre-fills an empty thought
channel, `<|channel>thought\\n<channel|>`. Tools are declared in the system turn as
`<|tool>declaration:NAME{description:<|"|>…<|"|>,parameters:{…}}<tool|>`, every string wrapped in
`<|"|>`. A call is `<|tool_call>call:NAME{key:<|"|>value<|"|>}<tool_call|>`; its result goes inside
the same model turn, `<|tool_response>response:NAME{value:<|"|>…<|"|>}<tool_response|>`, and the
model continues there (in a fresh thought channel when thinking is on).

Small or large template: a checkpoint's own template is used whenever it renders tools (every
Gemma 4 checkpoint ships one). Otherwise `own_text` follows the small-model template unless the
checkpoint's config says large: no per-layer input embeddings (`hidden_size_per_layer_input`
absent or 0, as in 26B-A4B and 31B; the E2B/E4B models have them).

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
    """A value in Gemma 4's argument syntax: strings in `<|"|>`, keys sorted, None as null."""
    if value is None:
        return "null"
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


def _upper(value) -> str:
    """Jinja's `upper` filter: '' for a missing value, else the text of the value upper-cased."""
    return "" if value is None else str(value).upper()


def _quoted_list(names) -> str:
    return ",".join(Q + str(n) + Q for n in names)


def _format_parameters(properties: dict, filter_keys: bool = False) -> str:
    """JSON-schema properties in the declaration syntax of the canonical template's
    `format_parameters` macro (field order: description, enum/items, nullable, properties,
    required, type)."""
    fields = []
    for key, value in sorted(properties.items()):
        if filter_keys and key in _STANDARD_KEYS:
            continue
        parts = []
        if value.get("description"):
            parts.append(f"description:{Q}{value['description']}{Q}")
        vtype = _upper(value.get("type"))
        if vtype == "STRING" and value.get("enum"):
            parts.append("enum:" + format_argument(value["enum"]))
        elif vtype == "ARRAY" and isinstance(value.get("items"), dict) and value["items"]:
            parts.append("items:{" + _format_items(value["items"]) + "}")
        if value.get("nullable"):
            parts.append("nullable:true")
        if vtype == "OBJECT":
            if isinstance(value.get("properties"), dict):
                parts.append("properties:{" + _format_parameters(value["properties"]) + "}")
            elif isinstance(value, dict):
                parts.append("properties:{" + _format_parameters(value, filter_keys=True) + "}")
            if value.get("required"):
                parts.append("required:[" + _quoted_list(value["required"]) + "]")
        parts.append(f"type:{Q}{vtype}{Q}")
        fields.append(key + ":{" + ",".join(parts) + "}")
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
            out.append("required:[" + _quoted_list(value) + "]")
        elif key == "type":
            out.append(
                "type:"
                + format_argument(
                    value.upper() if isinstance(value, str) else [_upper(v) for v in value]
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
            out += "required:[" + _quoted_list(params["required"]) + "],"
        if params.get("type"):
            out += f"type:{Q}{_upper(params['type'])}{Q}}}"
    if "response" in fn:
        response = fn["response"]
        out += ",response:{"
        if response.get("description"):
            out += f"description:{Q}{response['description']}{Q},"
        if _upper(response.get("type")) == "OBJECT":
            out += f"type:{Q}OBJECT{Q}}}"
    return (out + "}").strip()


def format_tool_response(name: str, response) -> str:
    """`<|tool_response>response:NAME{…}<tool_response|>`: a mapping's items, or `value:` for
    anything else (a result text)."""
    if isinstance(response, dict):
        body = ",".join(
            k + ":" + format_argument(v, escape_keys=False) for k, v in sorted(response.items())
        )
    else:
        body = "value:" + format_argument(response, escape_keys=False)
    return "<|tool_response>response:" + name + "{" + body + "}<tool_response|>"


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
    commitment_gap = ""  # the template writes the answer or the call right after `<channel|>`
    call_open_text = "<|tool_call>"
    think_open_text = "<|channel>"
    think_close_text = "<channel|>"
    stop_texts = ("<turn|>", "<eos>", "<tool_call|>", "<|tool_response>")
    end_of_turn_texts = ("<turn|>", "<eos>", "<|tool_response>", "<|turn>")

    def __init__(self, tokenizer, config: dict | None = None) -> None:
        super().__init__(tokenizer, config)
        # The large-model template (see the module docstring for the rule).
        text_config = (config or {}).get("text_config") or config or {}
        self.large = bool(config) and not text_config.get("hidden_size_per_layer_input")

    def own_text(
        self, messages: list[dict], tools: list[dict] | None = None, thinking: bool = True
    ) -> str:
        """Google's canonical Gemma 4 template (small or large, see the module docstring), ported
        for string contents: system, user, model turns with reasoning and tool calls, and `tool`
        messages rendered as responses inside the calling model turn."""
        out = [self.tokenizer.bos_token or ""]
        prev_type, prev_non_tool_role, rest = None, None, messages
        if thinking or tools or messages[0]["role"] in ("system", "developer"):
            out.append("<|turn>system\n")
            if thinking:
                out.append("<|think|>\n")
                prev_type = "think"
            if messages[0]["role"] in ("system", "developer"):
                out.append(messages[0]["content"].strip())
                rest = messages[1:]
            if tools:
                out.extend("<|tool>" + format_declaration(t) + "<tool|>" for t in tools)
                prev_type = "tool"
            out.append("<turn|>\n")
        last_user = max((i for i, m in enumerate(rest) if m["role"] == "user"), default=-1)
        for i, message in enumerate(rest):
            if message["role"] == "tool":
                continue
            prev_type = None
            role = "model" if message["role"] == "assistant" else message["role"]
            if not (role == "model" and prev_non_tool_role == "assistant"):
                out.append(f"<|turn>{role}\n")
            reasoning = message.get("reasoning") or message.get("reasoning_content")
            if reasoning and i > last_user:
                out.append("<|channel>thought\n" + reasoning + "\n<channel|>")
            calls = message.get("tool_calls") or []
            for call in calls:
                fn = call["function"]
                args = ",".join(
                    k + ":" + format_argument(v, escape_keys=False)
                    for k, v in sorted((fn.get("arguments") or {}).items())
                )
                out.append(f"<|tool_call>call:{fn['name']}{{{args}}}<tool_call|>")
                prev_type = "tool_call"
            responded = False
            if calls:
                for follow in rest[i + 1 :]:
                    if follow["role"] != "tool":
                        break
                    name = follow.get("name") or "unknown"
                    for call in calls:  # the template matches ids; two missing ids match too
                        if call.get("id") == follow.get("tool_call_id"):
                            name = call["function"]["name"]
                    out.append(format_tool_response(name, follow["content"]))
                    responded, prev_type = True, "tool_response"
            content = message["content"]
            content = _strip_thinking(content) if role == "model" else content.strip()
            out.append(content)
            next_role = next((m["role"] for m in rest[i + 1 :] if m["role"] != "tool"), None)
            continues = role == "model" and next_role == "assistant" and (not calls or responded)
            if prev_type == "tool_call" and not responded:
                out.append("<|tool_response>")
            elif not continues and not (responded and not content.strip() and next_role is None):
                out.append("<turn|>\n")
            prev_non_tool_role = message["role"]
        if prev_type not in ("tool_response", "tool_call"):
            out.append("<|turn>model\n")
            if self.large and not thinking:
                out.append("<|channel>thought\n<channel|>")
        elif prev_type == "tool_response" and thinking:
            out.append("<|channel>thought\n")
        return "".join(out)

    def render_tool_result(self, name: str, result: str, thinking: bool = True) -> str:
        """`<|tool_response>response:NAME{value:<|"|>…<|"|>}<tool_response|>` inside the model's
        turn, then `<|channel>thought\\n` when thinking is on (the model goes on in the same turn)."""
        return format_tool_response(name, result) + ("<|channel>thought\n" if thinking else "")

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
            pos = end + len("<tool_call|>")
            call = parse_gemma_call(text[body_start:end])
            call.end = pos
            scan.calls.append(call)
        residual.append(text[pos:])
        scan.residual = "".join(residual)
        return scan
