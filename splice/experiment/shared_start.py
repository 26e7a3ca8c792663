"""The prompts' shared start: the first tokens that every prompt of one base (NT, B, oracle_B)
begins with, which the engine computes once per run (engine/README.md, *The cache*:
`ForkRequest.shared`, `Engine.generate(..., shared=k)`).

Why the template and not the data: `shared=k` computes a prompt's tokens after the k-th on
another path than `shared=0` (the same tokens as HF's greedy, but a logit's last bits may differ),
so k must be fixed by what does not change with the run. The longest common prefix of the drawn
problems' prompts would change with n (a pilot of 2 problems against the full run), with the
problems a shard holds and with a replay of one unit. So the start is what the family's template
renders before any problem's own text: each base's prompt (their system turns and tools differ)
is rendered by the code that renders the real prompts (prompts.py `render_prompts`) for two
synthetic problems whose every text differs from its first character, and the start is their
common token prefix less `MARGIN` tokens: a BPE tokenizer may merge the template's last
characters with a problem's first ones, so the last token the two synthetic prompts share is not
certain to be in every real prompt.

A prompt's k (`SharedStarts.length`) is the tokens it shares with its base's start (usually all of
them; fewer only where a question's first characters merge further back)
and never the whole prompt (the engine needs a last token to feed). It depends on the template,
the tokenizer and the base alone, never on the data, n, the shard or the schedule, so every path
that computes a prompt (the bases and the self-consistency samples, the arms and resolutions
forked from a base, B's hidden-state pass; streamed or by unit; resumed, sharded or replayed by
`nudge verify`) passes the same k. The manifest records the starts' lengths (`shared_start`,
splice/rundir/README.md), so a resume or replay whose code would derive another start is refused
with the key named, rather than computing other bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nudgeability.models.families import Family
from nudgeability.splice.experiment.conditions import NO_TOOL_BASE, ORACLE_BASE, TOOL_BASE
from nudgeability.splice.experiment.prompts import render_prompts
from nudgeability.splice.tasks import Problem, Task

MARGIN = 1  # tokens left out of the start: a tokenizer may merge across the template's end
# Two problems whose question and context differ from their first character (MuSiQue's user turn
# opens with the paragraphs, StrategyQA's with the question): the first text a problem brings.
_FIRSTS = ("A", "7")


@dataclass(frozen=True)
class SharedStarts:
    """Each base's start (token ids), as `shared_starts` derives it from the template."""

    tokens: dict[str, tuple[int, ...]]  # base code -> the start's ids

    def length(self, base: str, prompt: Sequence[int]) -> int:
        """The `shared` of a prompt of `base` (or a prefix that begins with one): the tokens it
        shares with the start, at most all but its last."""
        start = self.tokens[base]
        common = 0
        for ours, theirs in zip(start, prompt):
            if ours != theirs:
                break
            common += 1
        return max(0, min(common, len(prompt) - 1))

    def to_manifest(self) -> dict[str, int]:
        """The manifest's `shared_start`: each base's start length."""
        return {base: len(ids) for base, ids in sorted(self.tokens.items())}


def shared_starts(task: Task, family: Family, oracle: bool) -> SharedStarts:
    """The start of NT's, B's and (with `oracle`) oracle_B's prompts (module docstring)."""
    first, second = (
        render_prompts(task, family, _synthetic(task, char), oracle) for char in _FIRSTS
    )
    bases = (NO_TOOL_BASE, TOOL_BASE) + ((ORACLE_BASE,) if oracle else ())
    tokens = {}
    for base in bases:
        a, b = first.for_base(base), second.for_base(base)
        common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        tokens[base] = tuple(a[: max(0, common - MARGIN)])
    return SharedStarts(tokens)


def _synthetic(task: Task, first: str) -> Problem:
    """A problem of `task` whose every text starts with `first` (rendered, never run)."""
    return Problem(
        id=f"shared-start-{first}",
        task=task.name,
        question=f"{first} question?",
        gold=(f"{first} answer",),
        context=((f"{first} title", f"{first} text."),),
    )
