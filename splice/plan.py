"""The plan of a run: which units of work exist, which this shard computes, and the record order.

Problems (in their drawn order) are cut into fixed chunks of `chunk_size`. A unit of work is one
(phase, seed, chunk): the phase's sequences for the chunk's problems, computed in one engine call.
The chunks depend only on the config, so a unit recomputed after a crash, or computed by a shard,
is batched exactly as in an uninterrupted unsharded run and gives the same bytes.

Phases run in the protocol's order: NT, then B, then oracle_B, then the arms (forks of B's and
oracle_B's prefixes), then, with `--resolve`, the resolution of every TOOL record (resolve.py). Shard k of n computes the chunks whose index i has i % n == k - 1.
The records file lists problems in drawn order, then conditions in canonical order, then seeds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from nudgeability.splice.experiment.conditions import PROMPT_PHASES, Condition

BASE_PHASES = PROMPT_PHASES  # NT, consistency (the K unaided samples), B, oracle_B
ARMS_PHASE = "arms"
RESOLVE_PHASE = "resolve"


@dataclass(frozen=True)
class Unit:
    """One unit of work: a phase's sequences for one chunk of problems under one seed."""

    phase: str  # "NT" | "B" | "oracle_B" | "arms" | "resolve"
    seed: int
    chunk: int  # index among all chunks (not only this shard's)

    @property
    def name(self) -> str:
        """The part file's stem, e.g. 'B-s0-c00003'."""
        return f"{self.phase}-s{self.seed}-c{self.chunk:05d}"


def chunk_bounds(num_problems: int, chunk_size: int) -> list[range]:
    """The index range of each chunk over the drawn problems."""
    return [
        range(start, min(start + chunk_size, num_problems))
        for start in range(0, num_problems, chunk_size)
    ]


def shard_chunks(num_chunks: int, shard: tuple[int, int] | None) -> list[int]:
    """The chunk indices a shard computes (all of them when `shard` is None)."""
    if shard is None:
        return list(range(num_chunks))
    k, n = shard
    return [i for i in range(num_chunks) if i % n == k - 1]


def phases_of(conditions: Sequence[Condition], resolve: bool = False) -> list[str]:
    """The phases a condition list needs, in order of work (`resolve` adds the resolution)."""
    codes = {condition.code for condition in conditions}
    phases = [phase for phase in BASE_PHASES if phase in codes]
    if any(condition.kind == "arm" for condition in conditions):
        phases.append(ARMS_PHASE)
    if resolve:
        phases.append(RESOLVE_PHASE)
    return phases


def units_of(phases: Sequence[str], seeds: Sequence[int], chunks: Sequence[int]) -> list[Unit]:
    """Every unit, in order of work: phase, then seed, then chunk."""
    return [Unit(phase, seed, chunk) for phase in phases for seed in seeds for chunk in chunks]


def canonical_keys(
    problem_ids: Sequence[str],
    conditions: Sequence[Condition],
    seeds: Sequence[int],
    samples: int = 0,
) -> Iterator[tuple[str, str, int, int | None]]:
    """(problem_id, condition, seed, sample) in record-file order: problems, then conditions,
    then seeds, then the samples 0..samples-1 of a "samples" condition (None for the others)."""
    for problem_id in problem_ids:
        for condition in conditions:
            for seed in seeds:
                if condition.kind == "samples":
                    for k in range(samples):
                        yield problem_id, condition.code, seed, k
                else:
                    yield problem_id, condition.code, seed, None
