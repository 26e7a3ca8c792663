"""The sizes that decide a group's KV memory (prefix, suffixes, budgets), and what a set of groups
costs: how work is sized before it exists (`splice/run/validation.py`, `splice/run/units/resolve.py`)."""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass


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
    def of(cls, prefix: int, suffixes: Seq[int], budgets: Seq[int]) -> GroupShape:
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

    @property
    def cost(self) -> int:
        """KV token slots of the group with every arm at its full budget (the last new token is
        sampled, never written)."""
        return self.prefix + sum(s + n - 1 for s, n in zip(self.suffixes, self.new_tokens))

    @property
    def least(self) -> int:
        """KV token slots the group needs to make progress at all: its prefix and its largest arm."""
        return self.prefix + max(s + n - 1 for s, n in zip(self.suffixes, self.new_tokens))


def batch_cost(shapes: Seq[GroupShape]) -> int:
    """KV token slots the groups need together when every arm runs to its full budget: what a
    budget (`--max-batch-tokens`) is checked against before a run. The engine itself never
    reserves it: it takes blocks as tokens are written, and runs a group whose arms do not fit
    together in waves."""
    return sum(s.cost for s in shapes)
