"""The inputs a family renders, checked: message lists, tool lists, declared tool names; and
`FamilyError`, the one error a family raises for bad input."""

from __future__ import annotations

ROLES = ("system", "user", "assistant", "tool", "observation")


class FamilyError(ValueError):
    """A family name, message list or argument that cannot be used; the message says what to fix."""


def tool_names(tools: list | None) -> set[str]:
    """Declared tool names from names or OpenAI-style tool dicts."""
    names = set()
    for tool in tools or ():
        if isinstance(tool, str):
            names.add(tool)
        elif isinstance(tool, dict):
            names.add(tool.get("function", tool).get("name"))
        else:
            raise FamilyError(f"tools: expected names or tool dicts, got {type(tool).__name__}")
    return names


def check_messages(messages: list[dict], tools: list[dict] | None) -> None:
    """Raise FamilyError unless `messages` is a non-empty list of {role, content} dicts and `tools`
    a list of OpenAI-style {"type": "function", "function": {"name", ...}} dicts."""
    if not isinstance(messages, list) or not messages:
        raise FamilyError(
            "messages: expected a non-empty list of {'role': ..., 'content': ...} dicts"
        )
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise FamilyError(f"messages[{i}]: expected a dict with 'role' in {ROLES}")
        if not isinstance(message.get("content"), str):
            raise FamilyError(f"messages[{i}]['content']: expected a str (use '' for none)")
    for i, tool in enumerate(tools or ()):
        if (
            not isinstance(tool, dict)
            or not isinstance(tool.get("function"), dict)
            or "name" not in tool["function"]
        ):
            raise FamilyError(
                f"tools[{i}]: expected {{'type': 'function', 'function': {{'name': ..., ...}}}}"
            )
