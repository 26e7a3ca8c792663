"""A trunk: one stretch of a base's tokens whose KV every fork cut inside it reads.

A study that cuts one base's reasoning at several places forks it once per cut, each fork with a
stem (the base's last prompt token and its tokens up to the cut). With `ForkRequest(trunk=T,
trunk_ids=...)` those forks share one run of the base's first `T` such tokens, the trunk: the
first fork makes it (copied from its `reuse` base, or computed by one row continuing the prompt
as the base computed it, exactly as a stem is) and every fork reads a `View` of it, its own first
`stem` tokens, as its last segment. A view is read as a segment of its own length, so a fork's
attention sees the keys, values and shapes that its own stem would give: the same bits.

`Trunks` keeps the live trunks by what decides their bits (the prompt before them, `shared`,
their tokens), each with the prompt segments it was computed after, while some group reads it;
a fork submitted after every reader finished makes a new one.
"""

from __future__ import annotations

from dataclasses import dataclass

from nudgeability.engine.errors import EngineInputError
from nudgeability.engine.sequence import ForkRequest, Run

TrunkKey = tuple[tuple[int, ...], int, tuple[int, ...]]


@dataclass
class Trunk:
    """A live trunk: its run, and the segments before it (which its readers read too)."""

    run: Run
    segments: list


class Trunks:
    """The live trunks by `TrunkKey`; one whose readers all finished is forgotten."""

    def __init__(self):
        self._live: dict[TrunkKey, Trunk] = {}

    def find(self, key: TrunkKey) -> Trunk | None:
        self._live = {k: t for k, t in self._live.items() if t.run.holders > 0}
        return self._live.get(key)

    def add(self, key: TrunkKey, run: Run, segments: list) -> None:
        self._live[key] = Trunk(run, list(segments))

    def __len__(self) -> int:
        return sum(1 for t in self._live.values() if t.run.holders > 0)


def trunk_tokens(request: ForkRequest, cut: int) -> list[int]:
    """The trunk's tokens from prefix position `cut` on (where its run starts: the stem's start,
    or the end of a `shared` start when the rest of the prompt joins the stem)."""
    return list(request.prefix_ids[cut:]) + list(request.trunk_ids[request.stem :])


def key_of(prompt: list[int], shared: int, tokens: list[int]) -> TrunkKey:
    return tuple(prompt), shared, tuple(tokens)


def check_trunk(request: ForkRequest, max_positions: int | None, where: str) -> None:
    """Refuse a `trunk` / `trunk_ids` that does not extend the request's stem, naming the field
    (the ids themselves: `requests.check_fork`)."""
    trunk, ids, stem = request.trunk, request.trunk_ids, request.stem
    if not trunk:
        if ids is not None:
            raise EngineInputError(f"{where}trunk_ids given without a trunk: set trunk")
        return
    if trunk < 0:
        raise EngineInputError(f"{where}trunk {trunk} is negative")
    if not stem:
        raise EngineInputError(f"{where}trunk {trunk} needs a stem: a trunk extends the stem")
    if trunk < stem:
        raise EngineInputError(f"{where}trunk {trunk} is shorter than the stem ({stem})")
    if ids is None or not isinstance(ids, (list, tuple)) or len(ids) != trunk:
        got = "none" if ids is None else f"{len(ids) if isinstance(ids, (list, tuple)) else ids!r}"
        raise EngineInputError(f"{where}trunk_ids must hold the trunk's {trunk} tokens, got {got}")
    if list(ids[:stem]) != list(request.prefix_ids[len(request.prefix_ids) - stem :]):
        raise EngineInputError(
            f"{where}trunk_ids: its first {stem} tokens are not the prefix's stem (its last "
            f"{stem} tokens)"
        )
    end = len(request.prefix_ids) - stem + trunk
    if max_positions is not None and end > max_positions:
        raise EngineInputError(
            f"{where}trunk: the prefix before the stem + trunk = {end} tokens exceeds the "
            f"model's context of {max_positions}"
        )


def check_base_trunk(base_context: list[int], tokens: list[int]) -> None:
    """Refuse a trunk that is not what the reused base has generated so far."""
    if base_context[: len(tokens)] != tokens:
        raise EngineInputError(
            f"trunk_ids: the trunk ({len(tokens)} tokens from the stem's start) is not the "
            "reused sequence's last prompt token and the tokens it has generated so far"
        )
