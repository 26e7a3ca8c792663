"""S, WT, WTrand and L as functions of the cut's relative position, and the likelihood view.

Per position table (join.py) and per +/- pair present in it, the estimates are exactly the
experiment's own (estimators/sensitivity.py, estimators/targeting.py), on the bin's rows:

    S      = 100 · (share of I_S with A_- = TOOL − share of I_S with A_+ = TOOL)     (pp)
    WT     = well-targeted flips / flips            (a flip: arm ≠ B's action, both SELF/TOOL)
    WTrand = Σ_{ν,b} F·K/N / Σ F                     (strata: polarity ν, base action b)
    L      = 100 · (WT − WTrand)                    (pp)

each with its 95% percentile interval from the project's bootstrap over problems
(estimators/intervals.py: whole problems resampled with both arms, so the + and − arms stay
paired; a sampled run's problems with all their seeds), with the experiment's replicates and seed.

The likelihood view (runs made with `nudge run --likelihoods`): per bin and pair, over the
problems of I_S whose + and − arms both carry `splice_logprob`, the mean splice log-probability
of each side (nats: how far off the model's own path the sentence lies there) and S over those
same problems. Whether an off-policy nudge moves delegation less reads across the bins: S beside
the log-probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from nudgeability.splice.experiment.conditions import SHIPPED_PAIRS

from ..actions import TOOL
from ..estimators.intervals import bootstrap, bootstrap_clustered, pair_arrays
from ..estimators.sensitivity import sensitivity_indicators, swing
from ..estimators.summary import PairEstimates, summarize_pair
from .bins import PositionBin
from .join import PositionTable, PositionTables


@dataclass(frozen=True)
class PairAtPosition(PairEstimates):
    """S, WT, WTrand and L of one pair at one position, with 95% intervals and counts."""

    bootstrap_undefined: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SpliceLikelihood:
    """The likelihood view of one pair at one position (module docstring)."""

    pair: str
    n: int  # problems of I_S whose + and − arms both carry a splice log-probability
    logprob_plus: float  # mean splice log-probability of the + arm over them (nats)
    logprob_minus: float  # the same of the − arm
    S: float  # S over those same problems (pp)


@dataclass(frozen=True)
class PositionPoint:
    """Everything at one position: its bin, its rows, and per pair the estimates."""

    bin: PositionBin
    n_rows: int  # (problem, seed) rows with an arm at the position
    n_problems: int
    mean_position: float  # the mean relative position of the kept cuts (1.0: the paper's cut)
    pairs: dict[str, PairAtPosition]
    likelihoods: dict[str, SpliceLikelihood] = field(default_factory=dict)


@dataclass(frozen=True)
class PositionSummary:
    """One experiment's by-position view: its points, bins ascending, then the paper's cut."""

    model: str
    task: str
    decoding: str
    bins: int
    n_boot: int
    boot_seed: int
    points: tuple[PositionPoint, ...]
    unplaced: int = 0  # arm records at extra cuts whose base had no boundary (join.py)
    continuation: str = "token"
    cohort: str = "open-weight"

    @property
    def pairs(self) -> tuple[str, ...]:
        """The pairs estimated at some extra cut: the shipped ones in their order, then a run's
        own as found."""
        found = [name for point in self.points if not point.bin.paper for name in point.pairs]
        known = [name for name in SHIPPED_PAIRS if name in found]
        return tuple(known + [name for name in dict.fromkeys(found) if name not in known])


def pair_at_position(
    table: PositionTable, pair: str, n_boot: int = 20000, seed: int = 0
) -> PairAtPosition:
    """The estimates of `pair` on one position table (module docstring)."""
    rows = table.table
    resample = bootstrap_clustered if rows.is_clustered else bootstrap
    boot = resample(rows, n_boot, seed, pair=pair)
    found = summarize_pair(rows, pair, boot)  # Table 1's estimates, on this position's rows
    shared = [f.name for f in fields(PairEstimates)]
    return PairAtPosition(
        **{name: getattr(found, name) for name in shared}, bootstrap_undefined=boot.undefined
    )


def splice_likelihood(table: PositionTable, pair: str) -> SpliceLikelihood | None:
    """The likelihood view of `pair` on one position table; None when no problem of I_S has
    both sides' splice log-probabilities."""
    plus_code, minus_code, _ = table.table.known.pairs[pair]
    lp_plus, lp_minus = table.splice_logprob.get(plus_code), table.splice_logprob.get(minus_code)
    if lp_plus is None or lp_minus is None:
        return None
    _, plus, minus = pair_arrays(table.table, pair)
    in_s, _, _ = sensitivity_indicators(plus, minus)
    kept = in_s & np.isfinite(lp_plus) & np.isfinite(lp_minus)
    n = int(kept.sum())
    if not n:
        return None
    tool_minus, tool_plus = int((minus[kept] == TOOL).sum()), int((plus[kept] == TOOL).sum())
    return SpliceLikelihood(
        pair=pair,
        n=n,
        logprob_plus=float(lp_plus[kept].mean()),
        logprob_minus=float(lp_minus[kept].mean()),
        S=float(swing(tool_minus, tool_plus, n)),
    )


def position_point(
    table: PositionTable, pairs=None, n_boot: int = 20000, seed: int = 0
) -> PositionPoint:
    """The estimates of every pair of `pairs` (default: every pair present) on one table."""
    rows = table.table
    names = [p for p in (rows.known.pairs if pairs is None else pairs) if rows.has_pair(p)]
    found = {name: pair_at_position(table, name, n_boot, seed) for name in names}
    views = {name: splice_likelihood(table, name) for name in names}
    return PositionPoint(
        bin=table.bin,
        n_rows=len(rows),
        n_problems=rows.n_problems,
        mean_position=table.mean_position,
        pairs=found,
        likelihoods={name: view for name, view in views.items() if view is not None},
    )


def summarize_positions(
    tables: PositionTables, n_boot: int = 20000, seed: int = 0
) -> PositionSummary:
    """The by-position view of one experiment: every pair forked at an extra cut, at every bin
    and at the paper's cut (the paper's point shows only those pairs: the others are the
    experiment's own summary)."""
    at_cuts = [t for t in tables.tables if not t.bin.paper]
    pairs = at_cuts[0].table.known.pairs if at_cuts else SHIPPED_PAIRS
    forked = [p for p in pairs if any(t.table.has_pair(p) for t in at_cuts)]
    points = tuple(position_point(t, forked, n_boot, seed) for t in tables.tables)
    label = tables.label
    return PositionSummary(
        model=label.model,
        task=label.task,
        decoding=label.decoding,
        bins=tables.bins,
        n_boot=int(n_boot),
        boot_seed=int(seed),
        points=points,
        unplaced=tables.unplaced,
        continuation=label.continuation,
        cohort=label.cohort,
    )
