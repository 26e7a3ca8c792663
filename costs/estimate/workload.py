"""What a run will compute, before it runs: its sequences, their prompts, and how long each is
expected to generate.

The prompts are exact: `prepare` (splice/run/prepare.py) renders them as the run will, and the
plan's chunks, seeds and conditions (splice/rundir/plan.py) say which sequences there are. What is
not known before running is how many tokens each sequence generates; that is the `Lengths`
assumption, stated in every estimate and overridable (`nudge plan --base-share ...`), or read from
a finished run's records (`lengths_from_records`, `nudge plan --from-run DIR`).

A problem contributes, for each seed: one sequence per base (NT, B, oracle_B where the oracle
conditions are asked), K self-consistency samples on NT's prompt, and the arms of each base that
closes its thinking, forked at its cut (prompt + the base's reasoning + the splice's tokens).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from nudgeability.splice.experiment.conditions import (
    CONSISTENCY,
    NO_TOOL_BASE,
    ORACLE_BASE,
    TOOL_BASE,
)
from nudgeability.splice.experiment.cuts import parse_cuts
from nudgeability.splice.rundir.plan import ARMS_PHASE, RESOLVE_PHASE

# The paper campaign's lengths (protocol: bases of up to 4,096 new tokens, arms of up to 2,048):
# bases average about 1,500 new tokens and arms about 800 on the reasoning models it runs.
PAPER_BASE_TOKENS, PAPER_BASE_BUDGET = 1500, 4096
PAPER_ARM_TOKENS, PAPER_ARM_BUDGET = 800, 2048


@dataclass(frozen=True)
class Lengths:
    """How much of its budget a sequence is expected to generate (the estimate's one guess).

    `base_share`: a base's mean new tokens over its budget; `arm_share`: an arm's over its
    budget; `closes`: the share of the bases with arms (B, oracle_B) that close their thinking,
    so that their arms run; `cut_share`: where the cut falls in a base's generation, as a share
    of its length (the arms' stem); `base_at_budget`, `arm_at_budget`: the share of bases and of
    arms that run to their budget (a unit lasts as long as its longest: schedule.py `parts`)."""

    base_share: float = PAPER_BASE_TOKENS / PAPER_BASE_BUDGET
    arm_share: float = PAPER_ARM_TOKENS / PAPER_ARM_BUDGET
    closes: float = 1.0
    cut_share: float = 0.9
    base_at_budget: float = 0.0
    arm_at_budget: float = 0.0
    source: str = "the paper campaign's assumption (bases 1,500 of 4,096, arms 800 of 2,048)"

    def __post_init__(self):
        for name in (
            "base_share",
            "arm_share",
            "closes",
            "cut_share",
            "base_at_budget",
            "arm_at_budget",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} {value}: a share, in [0, 1]")


@dataclass(frozen=True)
class BaseWork:
    """One base sequence of a problem: its prompt, the part of it every prompt of its base
    starts with (computed once per run), and the arms forked at its cut (their splices' token
    counts; empty for NT and the samples)."""

    phase: str
    prompt: int
    shared: int
    arms: tuple[int, ...] = ()
    seed: int = 0  # each seed's bases are a unit of their own (splice/rundir/plan.py)


@dataclass(frozen=True)
class Workload:
    """The sequences of one run (or one worker's shard): per chunk, per problem, its bases."""

    chunks: tuple[tuple[tuple[BaseWork, ...], ...], ...]  # chunk -> problem -> bases (all seeds)
    base_budget: int
    arm_budget: int
    signals: bool = False  # B's hidden-state pass: one more prefill of its prompt and stem
    resolve: bool = False  # the resolution phase, which the estimate leaves out (it says so)

    @property
    def problems(self) -> int:
        return sum(len(chunk) for chunk in self.chunks)

    def bases(self) -> Iterable[BaseWork]:
        for chunk in self.chunks:
            for problem in chunk:
                yield from problem

    def sequences(self, lengths: Lengths) -> float:
        """Expected sequences: every base, and the arms of the bases that close."""
        return sum(1 + lengths.closes * len(b.arms) for b in self.bases())

    def generated_tokens(self, lengths: Lengths) -> float:
        """Expected new tokens of the run: `Lengths` applied to every budget."""
        base = lengths.base_share * self.base_budget
        arm = lengths.arm_share * self.arm_budget
        return sum(base + lengths.closes * len(b.arms) * arm for b in self.bases())

    def prompt_tokens(self) -> int:
        """Prompt tokens of the bases (shared starts included: each is computed once a run)."""
        return sum(b.prompt for b in self.bases())


# `--cuts all` cuts after every sentence, a count only the reasoning decides: the estimate takes
# this many per base (costs/README.md)
ALL_CUTS_ASSUMED = 8


def arm_copies(config) -> int:
    """How many times each arm of a closed base runs: once per cut (the paper's and each extra
    cut of `--cuts`) and per sample (`--samples-per-arm`)."""
    cuts = 0
    if config.cuts is not None:
        spec = parse_cuts(config.cuts)
        cuts = ALL_CUTS_ASSUMED if spec.kind == "all" else len(spec.values)
    return (1 + cuts) * config.samples_per_arm


def workload_of(prepared, chunks: Iterable[int] | None = None) -> Workload:
    """The workload of a prepared run (splice/run/prepare.py `Prepared`), or of some of its
    chunks (a worker's shard)."""
    plan, config = prepared.plan, prepared.config
    by_id = {p.id: prompts for p, prompts in zip(prepared.problems, prepared.prompts)}
    starts = prepared.starts
    phases = [p for p in plan.phases if p not in (ARMS_PHASE, RESOLVE_PHASE)]
    copies = arm_copies(config)
    out = []
    for chunk in plan.mine if chunks is None else chunks:
        problems = []
        for pid in plan.problems_of(chunk):
            prompts, bases = by_id[pid], []
            for phase in phases:
                base = NO_TOOL_BASE if phase == CONSISTENCY else phase
                prompt = prompts.for_base(base)
                shared = starts.length(base, prompt) if starts is not None else 0
                arms = tuple(len(prepared.splices[a.code]) for a in plan.arms_of(phase)) * copies
                count = plan.samples if phase == CONSISTENCY else 1
                bases += [BaseWork(phase, len(prompt), shared, arms)] * count
            problems.append(tuple(replace(b, seed=s) for s in plan.seeds for b in bases))
        out.append(tuple(problems))
    return Workload(
        tuple(out),
        config.max_new_tokens,
        config.max_new_tokens_arm,
        signals=bool(config.signals),
        resolve=bool(config.resolve),
    )


def lengths_from_records(records, base_budget: int, arm_budget: int, where: str) -> Lengths:
    """`Lengths` measured on a run's records (splice/rundir/records.py `Record`s): the mean share
    of the budget each kind generated, the share of B / oracle_B that closed, and where they
    closed. ValueError naming `where` if it holds no base record."""
    bases, arms, closed, cuts, full_bases, full_arms = [], [], [], [], [], []
    for record in records:
        full = record.finish_reason == "length"
        if record.prefix_tokens is not None:  # an arm
            arms.append(len(record.generated_ids) / arm_budget)
            full_arms.append(full)
            continue
        bases.append(len(record.generated_ids) / base_budget)
        full_bases.append(full)
        if record.condition in (TOOL_BASE, ORACLE_BASE):
            closed.append(record.boundary is not None)
            if record.boundary is not None and record.generated_ids:
                cuts.append(record.boundary / len(record.generated_ids))
    if not bases:
        raise ValueError(f"{where}: no base record to measure lengths from")
    return Lengths(
        base_share=min(1.0, statistics.fmean(bases)),
        arm_share=min(1.0, statistics.fmean(arms)) if arms else Lengths.arm_share,
        closes=statistics.fmean(closed) if closed else 1.0,
        cut_share=statistics.fmean(cuts) if cuts else Lengths.cut_share,
        base_at_budget=statistics.fmean(full_bases),
        arm_at_budget=statistics.fmean(full_arms) if full_arms else 0.0,
        source=f"measured on {where} ({len(bases)} bases, {len(arms)} arms)",
    )


def lengths_from_run(root: str | Path) -> Lengths:
    """`lengths_from_records` on a run directory's records, at the budgets its manifest states
    (OutputDirError naming the file and field)."""
    from nudgeability.splice.audit.stored_run import open_run
    from nudgeability.splice.rundir.layout import RECORDS
    from nudgeability.splice.rundir.manifest import OutputDirError
    from nudgeability.splice.rundir.records import read_records

    run = open_run(root)
    config = run.manifest.data["config"]
    try:
        budgets = int(config["max_new_tokens"]), int(config["max_new_tokens_arm"])
    except (KeyError, TypeError, ValueError):
        raise OutputDirError(
            f"{run.root}/manifest.json: field config.max_new_tokens malformed"
        ) from None
    records = (record for _, record in read_records(run.root / RECORDS, OutputDirError))
    return lengths_from_records(records, *budgets, where=str(run.root))
