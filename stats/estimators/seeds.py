"""Across decoding seeds (the paper's Appendix G.5) and the repeated-label check.

stats/README.md, "Across seeds" and "The repeated-label check".

- `seed_spread`: for a sampled run (several seeds per problem), the unaided accuracy of each seed
  and the range (min, max) across seeds of S, WT, L and that accuracy, read off the per-seed
  summaries (each seed is a paired sample of its own).
- `repeated_labels`: how stable a problem's competence label is across K unaided draws (the
  sampled decoding's seeds: each seed's NT answer is one draw). Among the problems with at least
  two known labels, the share whose labels disagree ("flip"); then WT and L of the pooled table
  recomputed with every row's label replaced by draw k's label of its problem, for each draw k,
  reported per draw and as their range: how much of the targeting verdict rests on one draw of
  the labels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from nudgeability.splice.experiment.conditions import PRIMARY_PAIR

from ..table import ExperimentTable
from .diagnostics import Rate
from .intervals import pair_arrays
from .targeting import targeting


def value_range(values) -> tuple[float, float]:
    """(min, max) of the defined values; NaN ends when none is defined."""
    finite = [v for v in values if not math.isnan(v)]
    return (min(finite), max(finite)) if finite else (math.nan, math.nan)


def _width(bounds: tuple[float, float]) -> float:
    return bounds[1] - bounds[0]


@dataclass(frozen=True)
class SeedSpread:
    """Per-seed unaided accuracy, and ranges across seeds (S, L in pp; WT and accuracy in %)."""

    unaided: dict[int, Rate]
    S: tuple[float, float]
    WT: tuple[float, float]
    L: tuple[float, float]
    accuracy: tuple[float, float]

    # the width (max - min) of each range
    S_spread = property(lambda self: _width(self.S))
    WT_spread = property(lambda self: _width(self.WT))
    L_spread = property(lambda self: _width(self.L))
    accuracy_spread = property(lambda self: _width(self.accuracy))


def seed_spread(table: ExperimentTable, per_seed: Mapping[int, object]) -> SeedSpread | None:
    """The spread across the seeds of `per_seed` (PairSummary per seed); None for one seed."""
    if len(per_seed) < 2:
        return None
    unaided = {}
    for seed in per_seed:
        s = table.s[table.seed == seed]
        unaided[int(seed)] = Rate(int((s == 1).sum()), int((s >= 0).sum()))
    pairs = list(per_seed.values())
    return SeedSpread(
        unaided=unaided,
        S=value_range([p.S for p in pairs]),
        WT=value_range([100.0 * p.WT for p in pairs]),
        L=value_range([p.L for p in pairs]),
        accuracy=value_range([r.percent for r in unaided.values()]),
    )


@dataclass(frozen=True)
class RepeatedLabels:
    """The repeated-label check (module docstring). WT in %, L in pp."""

    draws: tuple[int, ...]  # the seeds whose NT answers are the label draws
    n_problems: int  # problems with >= 2 known labels
    flipped: int  # of them, those whose known labels disagree
    WT_per_draw: tuple[float, ...]
    L_per_draw: tuple[float, ...]

    @property
    def flip_share(self) -> float:
        return 100.0 * self.flipped / self.n_problems if self.n_problems else math.nan

    @property
    def WT_range(self) -> tuple[float, float]:
        return value_range(self.WT_per_draw)

    @property
    def L_range(self) -> tuple[float, float]:
        return value_range(self.L_per_draw)


def label_matrix(table: ExperimentTable) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """(labels (problems x draws), each row's problem index, the draws): label of each problem
    under each seed's NT answer, -1 where that seed has no known label for it."""
    problems, row_problem = np.unique(table.cluster, return_inverse=True)
    draws = table.seeds
    labels = np.full((len(problems), len(draws)), -1, dtype=np.int8)
    for k, seed in enumerate(draws):
        rows = table.seed == seed
        labels[row_problem[rows], k] = table.s[rows]
    return labels, row_problem, draws


def repeated_labels(table: ExperimentTable) -> RepeatedLabels | None:
    """The check on a table with several seeds per problem; None when it has one draw."""
    if len(table.seeds) < 2:
        return None
    labels, row_problem, draws = label_matrix(table)
    known = labels >= 0
    several = known.sum(axis=1) >= 2
    agree_right = np.where(known, labels == 1, True).all(axis=1)
    agree_wrong = np.where(known, labels == 0, True).all(axis=1)
    flipped = several & ~(agree_right | agree_wrong)
    base, conf, doubt = pair_arrays(table, PRIMARY_PAIR)
    wt, lift = [], []
    for k in range(len(draws)):
        found = targeting(labels[row_problem, k], base, conf, doubt)
        wt.append(100.0 * found.WT)
        lift.append(found.L)
    return RepeatedLabels(
        draws=draws,
        n_problems=int(several.sum()),
        flipped=int(flipped.sum()),
        WT_per_draw=tuple(wt),
        L_per_draw=tuple(lift),
    )
