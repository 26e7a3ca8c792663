"""The shapes of groups and batches as the engine runs them, and batches that fit a KV-token budget.

`GroupShape.of` is the one owner of the rule "an empty suffix borrows the prefix's last token",
and `BatchSlots.of` the one owner of what a batch allocates: `Batch` sizes its cache from it and
`batch_cost` is its token count, so the budget and the allocation agree by construction. Callers
that size runs before they exist (`splice/run/prepare.py`) use the same two functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nudgeability.engine.errors import EngineInputError


@dataclass(frozen=True)
class GroupShape:
    """The sizes that decide a group's memory, as run: prefix length, suffix lengths, new-token budgets.

    `borrowed` is how many tokens moved from the end of the prefix into every suffix (see `of`).
    """

    prefix: int
    suffixes: tuple[int, ...]
    new_tokens: tuple[int, ...]
    borrowed: int = 0

    @classmethod
    def of(cls, prefix: int, suffixes: Sequence[int], budgets: Sequence[int]) -> GroupShape:
        """The shape the engine runs for a prefix of `prefix` tokens continued by suffixes of the
        given lengths, each generating up to its budget of new tokens.

        An arm needs one input token to produce its first logits, so when any suffix of the group
        is empty, the prefix's last token moves into every arm of the group (one token per arm;
        nothing else changes). `Engine.generate` runs a prompt as its own prefix with an empty
        suffix, which makes it a prefix of all but the last token.
        """
        suffixes, budgets = tuple(int(n) for n in suffixes), tuple(int(b) for b in budgets)
        borrowed = 1 if prefix > 0 and any(n == 0 for n in suffixes) else 0
        return cls(prefix - borrowed, tuple(n + borrowed for n in suffixes), budgets, borrowed)

    def split(
        self, prefix_ids: list[int], suffix_ids: list[list[int]]
    ) -> tuple[list[int], list[list[int]]]:
        """The (prefix, suffixes) token ids as run: `borrowed` tokens moved from prefix to suffixes."""
        cut = len(prefix_ids) - self.borrowed
        return prefix_ids[:cut], [prefix_ids[cut:] + list(s) for s in suffix_ids]


@dataclass(frozen=True)
class BatchSlots:
    """The KV storage a batch of groups allocates: `groups` prefixes padded to `prefix_max`, and
    `rows` suffix rows of `suffix_capacity` static slots each (suffix plus new tokens; the last
    new token is sampled, never written)."""

    groups: int
    prefix_max: int
    rows: int
    suffix_max: int
    new_max: int

    @classmethod
    def of(cls, shapes: Sequence[GroupShape]) -> BatchSlots:
        return cls(
            groups=len(shapes),
            prefix_max=max(s.prefix for s in shapes),
            rows=sum(len(s.suffixes) for s in shapes),
            suffix_max=max(max(s.suffixes) for s in shapes),
            new_max=max(max(s.new_tokens) for s in shapes),
        )

    @property
    def suffix_capacity(self) -> int:
        return self.suffix_max + self.new_max - 1

    @property
    def tokens(self) -> int:
        return self.groups * self.prefix_max + self.rows * self.suffix_capacity


def batch_cost(shapes: Sequence[GroupShape]) -> int:
    """KV token slots a batch allocates (`BatchSlots.of(shapes).tokens`)."""
    return BatchSlots.of(shapes).tokens


def plan_batches(shapes: list[GroupShape], max_batch_tokens: int | None) -> list[list[int]]:
    """Group indices per batch, each batch's `batch_cost` within `max_batch_tokens` (None: one batch).

    Groups are taken longest prefix first, so that a batch pads its prefixes to similar lengths;
    the plan depends only on the shapes, so a rerun batches identically.
    """
    order = sorted(range(len(shapes)), key=lambda i: (-shapes[i].prefix, i))
    if max_batch_tokens is None:
        return [order] if order else []
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        alone = batch_cost([shapes[i]])
        if alone > max_batch_tokens:
            raise EngineInputError(
                f"one prefix group needs {alone} KV token slots (prefix {shapes[i].prefix}, "
                f"{len(shapes[i].suffixes)} arms) but max_batch_tokens is {max_batch_tokens}; raise the budget"
            )
        if current and batch_cost([shapes[j] for j in current + [i]]) > max_batch_tokens:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches
