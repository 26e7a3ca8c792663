"""Across experiments: medians of S, WT and L per task and pooled; Spearman rho between S and L.

stats/README.md, "Across experiments". Medians summarise experiment-level estimates (not pooled
problem rows), within one cohort (`cohorts`): the paper does not pool the sampled-decoding check
with the greedy campaign, nor the provider-served models with the open-weight ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..validation import same_shape


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n, ties sharing the mean of the ranks they span (scipy.stats.rankdata 'average')."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=np.float64)
    start = 0
    while start < len(values):
        stop = start
        while stop + 1 < len(values) and values[order[stop + 1]] == values[order[start]]:
            stop += 1
        ranks[order[start : stop + 1]] = (start + stop) / 2.0 + 1.0
        start = stop + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: the Pearson correlation of the average ranks of x and y.

    Pairs with a NaN are dropped; NaN when fewer than 2 pairs remain or a side is constant.
    """
    x, y = (a.astype(np.float64) for a in same_shape(x=x, y=y))
    keep = ~(np.isnan(x) | np.isnan(y))
    if keep.sum() < 2:
        return float("nan")
    rx, ry = average_ranks(x[keep]), average_ranks(y[keep])
    dx, dy = rx - rx.mean(), ry - ry.mean()
    denominator = math.sqrt(float((dx * dx).sum()) * float((dy * dy).sum()))
    return float((dx * dy).sum() / denominator) if denominator > 0 else float("nan")


def nanmedian(values: Sequence[float]) -> float:
    """The median of the non-NaN values; NaN when there are none."""
    finite = [v for v in values if not math.isnan(v)]
    return float(np.median(finite)) if finite else float("nan")


@dataclass(frozen=True)
class Medians:
    """Medians of S (pp), WT (fraction) and L (pp) over n experiments, and the flip events of those
    experiments pooled: `flips` in all, `self_to_tool` of them SELF->TOOL (primary pair)."""

    S: float
    WT: float
    L: float
    n: int
    self_to_tool: int = 0
    flips: int = 0

    @property
    def share_self_to_tool(self) -> float:
        """The pooled SELF->TOOL share of flips (the paper's 72%); NaN with no flip."""
        return self.self_to_tool / self.flips if self.flips else float("nan")


@dataclass(frozen=True)
class AcrossExperiments:
    """Medians per task and pooled ('pooled'), and Spearman rho of S vs L over the experiments."""

    medians: dict[str, Medians]
    spearman_S_L: float
    n_experiments: int


def across_experiments(experiments: Sequence) -> AcrossExperiments:
    """Summarise experiments (objects with .task, .S, .WT, .L and, when known, .flips, a
    FlipComposition; e.g. ExperimentSummary). Flip events are pooled by summing counts, so each
    experiment weighs by its number of flips, unlike the medians."""

    def medians(group) -> Medians:
        compositions = [e.flips for e in group if getattr(e, "flips", None) is not None]
        return Medians(
            nanmedian([e.S for e in group]),
            nanmedian([e.WT for e in group]),
            nanmedian([e.L for e in group]),
            len(group),
            sum(c.self_to_tool_well + c.self_to_tool_ill for c in compositions),
            sum(c.flips for c in compositions),
        )

    tasks = list(dict.fromkeys(e.task for e in experiments))
    table = {task: medians([e for e in experiments if e.task == task]) for task in tasks}
    table["pooled"] = medians(list(experiments))
    rho = spearman([e.S for e in experiments], [e.L for e in experiments])
    return AcrossExperiments(table, rho, len(experiments))


def cohort_key(summary) -> str:
    """The group an experiment's medians belong to: its cohort (open-weight or provider-served,
    read from the manifest by records/cohorts.py) and its decoding config."""
    return f"{getattr(summary, 'cohort', 'open-weight')}, {summary.decoding}"


def cohorts(summaries: Sequence) -> dict[str, list]:
    """Experiments grouped for the medians, by `cohort_key`, in order of first appearance. The
    continuation level does not decide the cohort (a provider may serve token-level completions);
    it stays marked on each experiment's row."""
    groups: dict[str, list] = {}
    for summary in summaries:
        groups.setdefault(cohort_key(summary), []).append(summary)
    return groups


def across_cohorts(summaries: Sequence) -> Mapping[str, AcrossExperiments]:
    """`across_experiments` of each cohort, keyed and ordered as `cohorts`."""
    return {key: across_experiments(group) for key, group in cohorts(summaries).items()}
