"""Tool calls written outside a family's call syntax (see models/README.md, "Actions")."""

from __future__ import annotations

import json
import re

_JSON_CALL_START = re.compile(r'\{\s*"name"\s*:')


def json_call_outside_format(text: str, declared: set[str]) -> str | None:
    """The tool name when `text` holds a JSON object `{"name": <declared tool>, "arguments": {...}}`
    written outside the family's call syntax (bare or in a code fence), else None."""
    decoder = json.JSONDecoder()
    for match in _JSON_CALL_START.finditer(text):
        try:
            obj, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if (
            isinstance(obj, dict)
            and obj.get("name") in declared
            and isinstance(obj.get("arguments"), (dict, str))
        ):
            return obj["name"]
    return None
