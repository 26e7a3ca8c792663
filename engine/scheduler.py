"""Split prefix groups into batches that fit a KV-token budget."""

from __future__ import annotations

from dataclasses import dataclass

from nudgeability.engine.errors import EngineInputError


@dataclass(frozen=True)
class GroupShape:
    """The sizes that decide a group's memory: prefix length, suffix lengths, new-token budgets."""

    prefix: int
    suffixes: tuple[int, ...]
    new_tokens: tuple[int, ...]


def batch_cost(shapes: list[GroupShape]) -> int:
    """KV token slots a batch allocates: G padded prefixes plus N static suffix rows."""
    p_max = max(s.prefix for s in shapes)
    s_max = max(max(s.suffixes) for s in shapes)
    c_max = max(max(s.new_tokens) for s in shapes)
    rows = sum(len(s.suffixes) for s in shapes)
    return len(shapes) * p_max + rows * (s_max + c_max)


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
