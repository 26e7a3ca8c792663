"""Problem × condition → prompt ids, rendered through the model family's chat template.

Each problem has three prompts: unaided (NT: no tool declared), with the task's tool (B and the
arms forked from it) and with `ask_expert` (oracle_B and its arms). Each is rendered once, with
the thinking block open, and hashed as little-endian int32 ids for the records.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from nudgeability.models.families import Family
from nudgeability.splice.experiment.conditions import NO_TOOL_BASE, ORACLE_BASE, TOOL_BASE
from nudgeability.splice.tasks import Problem, Task


@dataclass(frozen=True)
class ProblemPrompts:
    """The rendered prompts of one problem (token ids); `oracle` is None when no oracle run is asked."""

    unaided: tuple[int, ...]
    with_tool: tuple[int, ...]
    oracle: tuple[int, ...] | None

    def for_base(self, base: str) -> tuple[int, ...]:
        """The prompt of a base run: 'NT', 'B' or 'oracle_B'."""
        prompt = {NO_TOOL_BASE: self.unaided, TOOL_BASE: self.with_tool, ORACLE_BASE: self.oracle}[
            base
        ]
        if prompt is None:
            raise ValueError(
                f"no {base} prompt was rendered: the oracle conditions are not in this run"
            )
        return prompt


def declared_tools(task: Task, base: str) -> tuple[str, ...] | None:
    """The tool names the prompt of `base` declares (None for the unaided prompt)."""
    return {NO_TOOL_BASE: None, TOOL_BASE: task.tool_names, ORACLE_BASE: task.oracle_tool_names}[
        base
    ]


def render_prompts(task: Task, family: Family, problem: Problem, oracle: bool) -> ProblemPrompts:
    """Render the unaided, with-tool and (if `oracle`) oracle prompts of one problem."""
    unaided = render(family, task.unaided_messages(problem), None)
    with_tool = render(family, *task.with_tool(problem))
    oracle_ids = tuple(render(family, *task.oracle(problem))) if oracle else None
    return ProblemPrompts(tuple(unaided), tuple(with_tool), oracle_ids)


def render(family: Family, messages: list[dict], tools: list[dict] | None) -> list[int]:
    """Prompt ids of a conversation, with the family's format demonstrations (if it has any) placed
    after the system turn, before the real question."""
    shown = family.demonstrations(tools)
    if shown:
        lead = 1 if messages and messages[0]["role"] == "system" else 0
        messages = messages[:lead] + shown + messages[lead:]
    return family.render(messages, tools=tools, thinking=True)


def prompt_sha256(ids) -> str:
    """sha256 of token ids as little-endian int32 bytes (the records' `prompt_sha256`)."""
    return hashlib.sha256(struct.pack(f"<{len(ids)}i", *ids)).hexdigest()
