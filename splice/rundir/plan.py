"""The plan of a run: which units of work exist, which this shard computes, and the record order.

Problems (in their drawn order) are cut into fixed chunks of `chunk_size`. A unit of work is one
(phase, seed, chunk): the phase's sequences for the chunk's problems, computed in one engine call.
The chunks depend only on the config, so a unit recomputed after a crash, or computed by a shard,
is batched exactly as in an uninterrupted unsharded run and gives the same bytes.

Phases run in the protocol's order: NT, the self-consistency samples, B, oracle_B, then the arms
(forks of B's and oracle_B's prefixes), then, with `--resolve`, the resolution of every TOOL record
(splice/run/units/resolve.py). Shard k of n computes the chunks whose index i has i % n == k - 1. The
records file lists problems in drawn order, then conditions in canonical order, then seeds (then
the samples of the self-consistency condition).

A `Plan` is read from a manifest (`Plan.from_manifest`), the one way it is built: the runner
builds it from the manifest it is about to write, and `nudge verify`, `nudge merge` and the replay
from the manifest they read, so the four can never disagree on a key, a unit or the order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from nudgeability.splice.experiment.conditions import (
    CONSISTENCY,
    PROMPT_PHASES,
    Condition,
    UnknownConditionError,
    with_consistency,
)
from nudgeability.splice.experiment.interventions import ARM_BASES
from nudgeability.splice.rundir.layout import MANIFEST
from nudgeability.splice.rundir.manifest import OutputDirError, manifest_conditions
from nudgeability.splice.rundir.records import RecordKey

BASE_PHASES = PROMPT_PHASES  # NT, consistency (the K unaided samples), B, oracle_B
ARMS_PHASE = "arms"
RESOLVE_PHASE = "resolve"


@dataclass(frozen=True)
class Unit:
    """One unit of work: a phase's sequences for one chunk of problems under one seed."""

    phase: str  # "NT" | "consistency" | "B" | "oracle_B" | "arms" | "resolve"
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
) -> Iterator[RecordKey]:
    """The keys in record-file order: problems, then conditions, then seeds, then the samples
    0..samples-1 of a "samples" condition (None for the others)."""
    for problem_id in problem_ids:
        for condition in conditions:
            for seed in seeds:
                if condition.kind == "samples":
                    for k in range(samples):
                        yield RecordKey(problem_id, condition.code, seed, k)
                else:
                    yield RecordKey(problem_id, condition.code, seed)


@dataclass(frozen=True)
class Plan:
    """The keys, units and canonical order of one run (or shard); see the module docstring."""

    problem_ids: tuple[str, ...]
    conditions: tuple[Condition, ...]  # canonical order, with `consistency` when samples > 0
    seeds: tuple[int, ...]
    chunk_size: int
    shard: tuple[int, int] | None = None
    samples: int = 0  # --consistency-samples K: K records per problem of the consistency unit
    resolve: bool = False  # the resolution phase follows the arms
    arm_samples: int = 1  # --samples-per-arm N: records per arm and cut

    def arm_keys(self, key: RecordKey, cuts: Sequence[int]) -> list[RecordKey]:
        """The keys of one arm of one problem and seed (`key`, at the paper's cut): at the
        paper's cut and then at each extra cut of its base (`cuts`), each cut's samples in order
        (the first None, then 1..N-1)."""
        samples = [None, *range(1, self.arm_samples)]
        return [key._replace(at=at, sample=k) for at in [None, *cuts] for k in samples]

    @classmethod
    def from_manifest(cls, manifest: Mapping, where: str | Path = MANIFEST) -> Plan:
        """The plan a manifest calls for; `OutputDirError` naming `where` and the field that is
        missing or malformed."""
        known = manifest_conditions(manifest, where)  # the shipped conditions and the run's own
        try:
            config = manifest["config"]
            samples = int(config.get("consistency_samples") or 0)
            conditions = with_consistency(known.parse(config["conditions"]), samples)
            shard = config["shard"]
            plan = cls(
                problem_ids=tuple(manifest["problems"]),
                conditions=tuple(conditions),
                seeds=tuple(int(seed) for seed in config["seeds"]),
                chunk_size=int(config["chunk_size"]),
                shard=None if shard is None else (int(shard[0]), int(shard[1])),
                samples=samples,
                resolve=bool(config.get("resolve")),
                arm_samples=int(config.get("samples_per_arm") or 1),
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            what = exc.args[0] if isinstance(exc, KeyError) else exc
            if isinstance(exc, UnknownConditionError):
                what = f"config.conditions: {exc}"
            raise OutputDirError(
                f"{where}: field {what} missing or malformed; not a manifest of `nudge run`"
            ) from None
        if plan.chunk_size < 1:
            raise OutputDirError(
                f"{where}: field config.chunk_size {plan.chunk_size} malformed; not a manifest "
                "of `nudge run`"
            )
        return plan

    # ----- chunks and units -------------------------------------------------------------------
    @cached_property
    def chunks(self) -> tuple[range, ...]:
        """The index range of every chunk of the drawn problems (all shards')."""
        return tuple(chunk_bounds(len(self.problem_ids), self.chunk_size))

    @cached_property
    def mine(self) -> tuple[int, ...]:
        """The chunks this run (or shard) computes."""
        return tuple(shard_chunks(len(self.chunks), self.shard))

    @cached_property
    def phases(self) -> tuple[str, ...]:
        """The phases of the run, in order of work."""
        return tuple(phases_of(self.conditions, self.resolve))

    @cached_property
    def record_phases(self) -> tuple[str, ...]:
        """The phases whose parts hold records (all but the resolution)."""
        return tuple(phase for phase in self.phases if phase != RESOLVE_PHASE)

    def units(self, phase: str | None = None) -> list[Unit]:
        """This run's units in order of work (phase, seed, chunk), or those of one phase."""
        phases = self.phases if phase is None else (phase,)
        return units_of(phases, self.seeds, self.mine)

    def units_of_chunk(self, chunk: int, phases: Sequence[str]) -> list[Unit]:
        """The units of `phases` (every seed) for one chunk, in order of work."""
        return units_of(phases, self.seeds, [chunk])

    def problems_of(self, chunk: int) -> list[str]:
        """The ids of a chunk's problems, in drawn order."""
        return [self.problem_ids[i] for i in self.chunks[chunk]]

    def arms_of(self, base: str) -> list[Condition]:
        """The arms that fork from `base`, in canonical order."""
        return [c for c in self.conditions if c.kind == "arm" and c.base == base]

    def condition(self, code: str) -> Condition:
        """The run's condition with this code (KeyError if the run has none)."""
        return self._by_code[code]

    @cached_property
    def _by_code(self) -> dict[str, Condition]:
        return {c.code: c for c in self.conditions}

    @cached_property
    def arm_bases(self) -> tuple[str, ...]:
        """The bases that have arms in this plan (B, oracle_B)."""
        return tuple(base for base in ARM_BASES if self.arms_of(base))

    @cached_property
    def base_codes(self) -> frozenset[str]:
        """The conditions generated from a prompt (every problem has a record of each)."""
        return frozenset(c.code for c in self.conditions if c.kind in ("base", "samples"))

    def inputs_of(self, unit: Unit) -> list[Unit]:
        """The stored units `unit` is computed from: an arms unit forks from its bases' records,
        a resolution unit reads the records of the bases with tools and of the arms (same seed
        and chunk); a base unit reads none."""
        if unit.phase == ARMS_PHASE:
            phases = self.arm_bases
        elif unit.phase == RESOLVE_PHASE:
            phases = [p for p in self.record_phases if p in ARM_BASES or p == ARMS_PHASE]
        else:
            return []
        return [Unit(phase, unit.seed, unit.chunk) for phase in phases]

    def dependents_of(self, unit: Unit) -> list[Unit]:
        """The units computed from `unit` (those whose `inputs_of` hold it), in order of work."""
        chunk_units = self.units_of_chunk(unit.chunk, self.phases)
        return [u for u in chunk_units if u.seed == unit.seed and unit in self.inputs_of(u)]

    # ----- keys ---------------------------------------------------------------------------------
    def keys(self, chunk: int) -> Iterator[RecordKey]:
        """The keys a chunk's records can have, in canonical order (an arm's only where its base
        closed its thinking: `expected_keys` and the assembly decide that from the records)."""
        return canonical_keys(self.problems_of(chunk), self.conditions, self.seeds, self.samples)

    def expected_keys(
        self, unit: Unit, base_records: Mapping[str, Mapping[str, Mapping]] | None = None
    ) -> set[RecordKey]:
        """The keys the part of a record unit must hold. A base unit: one record per problem of
        its chunk; the self-consistency unit: `samples` per problem; the arms unit: one per arm
        of each problem whose base record closed its thinking, at the paper's cut and at each of
        the extra cuts the base record lists (`cuts`), read from `base_records` (each base with
        arms -> {problem id: its record}, same seed and chunk)."""
        ids = self.problems_of(unit.chunk)
        if unit.phase == CONSISTENCY:
            return {
                RecordKey(pid, unit.phase, unit.seed, k) for pid in ids for k in range(self.samples)
            }
        if unit.phase != ARMS_PHASE:
            return {RecordKey(pid, unit.phase, unit.seed) for pid in ids}
        keys = set()
        for base, records in (base_records or {}).items():
            arms = [arm.code for arm in self.arms_of(base)]
            for pid in ids:
                if records[pid].get("boundary") is not None:
                    cuts = records[pid].get("cuts") or ()
                    for arm in arms:
                        keys.update(self.arm_keys(RecordKey(pid, arm, unit.seed), cuts))
        return keys
