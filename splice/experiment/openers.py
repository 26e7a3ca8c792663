"""The openers of the two actions, whose probability right after the think-close a run scores
(`nudge run --likelihoods`; splice/run/units/likelihoods.py).

P(TOOL) is the probability of the family's tool-call opener (models/families/base.py
`call_opener`: `<tool_call>` for Qwen3 and ChatML, `<|tool_call>` for Gemma 4, the tool's name on
its own line for GLM-Z1) and P(answer) that of the task's answer label (`Task.answer_opener`,
`Answer:`, as both answering prompts ask), each after the gap the family writes between the close
and the action (`Family.commitment_gap`), tokenised on their own as a splice is. When neither
opener's ids are a prefix of the other's, the two are disjoint continuations of one context and
P(TOOL) + P(answer) <= 1; a run refuses openers that nest (`check_exclusive`), whose two
probabilities would count the shorter one's mass twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from nudgeability.models.families import Family
from nudgeability.splice.experiment.prompts import declared_tools
from nudgeability.splice.tasks import Task


@dataclass(frozen=True)
class Openers:
    """The ids of the tool-call opener and of the answer opener, each with the gap before it."""

    tool: tuple[int, ...]
    answer: tuple[int, ...]

    @property
    def exclusive(self) -> bool:
        """Whether neither sequence is a prefix of the other (so the two events are disjoint)."""
        shorter = min(len(self.tool), len(self.answer))
        return self.tool[:shorter] != self.answer[:shorter]


def action_openers(family: Family, task: Task, base: str) -> Openers:
    """The openers after the think-close of an arm of `base` ('B' or 'oracle_B'): the call of
    the first tool its prompt declares, and the task's answer label."""
    tool = declared_tools(task, base)[0]
    return Openers(
        tuple(family.action_opener(family.call_opener(tool))),
        tuple(family.action_opener(task.answer_opener)),
    )


def check_exclusive(openers: Openers, family: Family, base: str) -> None:
    """Refuse openers one of which begins the other: P(TOOL) + P(answer) would not be a share of
    one distribution (ValueError naming the family and the ids)."""
    if not openers.exclusive:
        raise ValueError(
            f"--likelihoods: the {family.name} family's tool-call opener {list(openers.tool)} and "
            f"the answer opener {list(openers.answer)} after {base}'s think-close nest (one "
            "begins the other), so their probabilities are not exclusive"
        )
