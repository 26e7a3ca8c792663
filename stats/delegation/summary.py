"""Every delegation-value estimate of one experiment, with its problem-level bootstrap interval.

    table = ValueTable(s, actions={"NT": ..., "B": ..., "conf": ...}, final={...}, ...)
    summary = summarize_value(table, n_boot=20000, seed=0)

Each row (problem, seed) reduces to one row of integer counts: for every condition its retained
and right rows, for every (+, -) pair its I_V counts and its flip strata, for every tool its
resolutions and right answers. The rows of one problem are summed (a cluster), the clusters are
resampled with replacement (resampling.bootstrap.resample_sums, the same kernel and draws as the
S/WT bootstrap), and every statistic is recomputed from the resampled sums by the formulas of
value.py.
Intervals are 95% percentile intervals; a replicate in which a statistic is undefined (no
retained row, no flip) is left out of that statistic's interval.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from nudgeability.splice.experiment.conditions import SHIPPED_CONDITIONS, ConditionSet

from ..estimators.sensitivity import swing
from ..estimators.targeting import STRATA
from ..resampling.bootstrap import aggregate_by_cluster, percentile_interval, resample_sums
from .table import ValueTable
from .value import (
    FLIP_QUANTITIES,
    FinalAccuracy,
    FlipValue,
    ToolAccuracy,
    ValueSwing,
    accuracy_from_counts,
    accuracy_indicators,
    final_accuracy,
    flip_indicators,
    flip_value,
    flip_value_from_counts,
    share_from_counts,
    swing_indicators,
    tool_accuracy,
    value_swing,
)


@dataclass(frozen=True)
class DelegationValueSummary:
    """Delegation value of one experiment: every estimate carries its 95% interval (`ci`)."""

    model: str
    task: str
    decoding: str
    n_problems: int
    n_rows: int
    n_boot: int
    boot_seed: int
    accuracy: dict[str, FinalAccuracy]
    swing: dict[str, ValueSwing]
    flips: dict[str, FlipValue]
    tools: dict[str, ToolAccuracy]
    known: ConditionSet = SHIPPED_CONDITIONS  # the conditions its runs know (their pairs)


@dataclass
class _Columns:
    """Where each estimator's counts sit in a contribution row."""

    accuracy: dict[str, tuple[int, int]] = field(default_factory=dict)  # (right, retained)
    swing: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # (n, minus, plus)
    flips: dict[str, np.ndarray] = field(default_factory=dict)  # (4, 6) column indices
    tools: dict[str, tuple[int, int]] = field(default_factory=dict)  # (right, resolved)
    blocks: list[np.ndarray] = field(default_factory=list)

    def add(self, *arrays) -> tuple[int, ...]:
        start = sum(len(b) for b in self.blocks)
        self.blocks.extend(np.asarray(a, dtype=np.int64)[None, :] for a in arrays)
        return tuple(range(start, start + len(arrays)))

    def matrix(self, n: int) -> np.ndarray:
        if not self.blocks:
            return np.zeros((n, 0), dtype=np.int64)
        return np.ascontiguousarray(np.concatenate(self.blocks, axis=0).T)


def value_contributions(table: ValueTable) -> tuple[np.ndarray, _Columns]:
    """The (rows, C) int64 count matrix of every estimator, and where each one's columns are."""
    cols = _Columns()
    for c in table.conditions():
        retained, right = accuracy_indicators(table.final[c])
        cols.accuracy[c] = cols.add(right, retained)
    for pair in table.pairs():
        plus, minus, base = table.known.pairs[pair]
        both, right_minus, right_plus = swing_indicators(table.final[plus], table.final[minus])
        cols.swing[pair] = cols.add(both, right_minus, right_plus)
        index = np.zeros((len(STRATA), len(FLIP_QUANTITIES)), dtype=np.int64)
        for j, (polarity, b) in enumerate(STRATA):
            arm = plus if polarity == "+" else minus
            found = flip_indicators(
                table.s,
                table.actions[base],
                table.actions[arm],
                table.final[base],
                table.final[arm],
                b,
            )
            index[j] = cols.add(*(found[q] for q in FLIP_QUANTITIES))
        cols.flips[pair] = index
    for tool in sorted(table.tool_resolved):
        cols.tools[tool] = cols.add(table.tool_right[tool], table.tool_resolved[tool])
    return cols.matrix(len(table)), cols


def summarize_value(
    table: ValueTable, n_boot: int = 20000, seed: int = 0, *, engine: str = "numba"
) -> DelegationValueSummary:
    """Point estimates (value.py) of `table`, each with its 95% percentile interval."""
    contrib, cols = value_contributions(table)
    units = aggregate_by_cluster(contrib, table.cluster)
    sums = resample_sums(units, n_boot, seed, engine)
    accuracy = {
        c: dataclasses.replace(
            final_accuracy(table.final[c]),
            ci=percentile_interval(accuracy_from_counts(sums[:, right], sums[:, kept])),
        )
        for c, (right, kept) in cols.accuracy.items()
    }
    swings, flips = {}, {}
    for pair in table.pairs():
        plus, minus, base = table.known.pairs[pair]
        n, right_minus, right_plus = cols.swing[pair]
        swings[pair] = dataclasses.replace(
            value_swing(table.final[plus], table.final[minus]),
            ci=percentile_interval(swing(sums[:, right_minus], sums[:, right_plus], sums[:, n])),
        )
        point = flip_value(
            table.s,
            table.actions[base],
            table.actions[plus],
            table.actions[minus],
            table.final[base],
            table.final[plus],
            table.final[minus],
        )
        replicates = flip_value_from_counts(sums[:, cols.flips[pair]])
        names = ("helpful_ci", "harmful_ci", "helpful_rand_ci", "harmful_rand_ci")
        flips[pair] = dataclasses.replace(
            point, **{name: percentile_interval(r) for name, r in zip(names, replicates)}
        )
    tools = {
        tool: dataclasses.replace(
            tool_accuracy(table.tool_resolved[tool], table.tool_right[tool]),
            ci=percentile_interval(share_from_counts(sums[:, right], sums[:, resolved])),
        )
        for tool, (right, resolved) in cols.tools.items()
    }
    return DelegationValueSummary(
        model=table.label.model,
        task=table.label.task,
        decoding=table.label.decoding,
        n_problems=int(np.unique(table.cluster).size),
        n_rows=len(table),
        n_boot=int(n_boot),
        boot_seed=int(seed),
        accuracy=accuracy,
        swing=swings,
        flips=flips,
        tools=tools,
        known=table.known,
    )
