"""The diagnostics that are ratios of sums, each with its 95% problem-bootstrap interval.

stats/README.md, "Intervals of the diagnostics". Every supporting number of the paper's Tables
6-9 is a ratio of counts over problems: a delegation rate (TOOL / completed), Gamma (two rates
conditioned on s), a paired rate difference (|empty - B|, neutral - empty, Phi), the oracle's rho
and omega, Dself and Rself, the unaided accuracy, and the sealed - open change of the swing (G.7).
So, as for S and L (intervals.py), each row of the table (a problem, or a problem's seed) gives a
few integer columns, a unit (problem, with all its seeds) sums its rows, the bootstrap kernel
(resampling.bootstrap.resample_sums) draws units and sums their columns, and each statistic is
evaluated on the sums by one formula, for the point estimate and every replicate alike.

The definitions are those of diagnostics.py and sensitivity.py: a rate drops TRUNC and missing
actions; a paired difference keeps the problems where both conditions completed; the formulas
are written once here as functions of count sums, and diagnostics.py's point estimates (Rate
objects with their counts) stay the reference the tests compare with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from nudgeability.splice.experiment.conditions import PRIMARY_PAIR, SHIPPED_PAIRS, TOOL_BASE

from ..actions import SELF, TOOL, completed
from ..resampling.bootstrap import (
    Interval,
    aggregate_by_cluster,
    percentile_interval,
    resample_sums,
)
from ..table import ExperimentTable
from .sensitivity import sensitivity_indicators, swing

SEALED_PAIR = "sealed"


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its 95% percentile interval and the rows it is computed over."""

    value: float
    ci: Interval
    n: int


# A statistic: its named integer columns (one value per table row) and its formula on their sums
# (an (R, k) array: one row per replicate, the point estimate being one more row).
Formula = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class _Statistic:
    columns: tuple[np.ndarray, ...]
    formula: Formula
    n_column: int  # which column's sum is the retained count n


def _percent(num, den) -> np.ndarray:
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, 100.0 * num / np.where(den > 0, den, 1), np.nan)


def _rate(num: np.ndarray, den: np.ndarray) -> _Statistic:
    """100 * sum(num) / sum(den)."""
    return _Statistic((num, den), lambda s: _percent(s[:, 0], s[:, 1]), 1)


def _paired_difference(first: np.ndarray, second: np.ndarray) -> _Statistic:
    """100 * (P(first = TOOL) - P(second = TOOL)) over rows where both completed (diagnostics.py)."""
    both = completed(first) & completed(second)
    columns = (both, both & (first == TOOL), both & (second == TOOL))
    return _Statistic(columns, lambda s: _percent(s[:, 1], s[:, 0]) - _percent(s[:, 2], s[:, 0]), 0)


def _gamma(s: np.ndarray, base: np.ndarray) -> _Statistic:
    """P(B = TOOL | s = 0) - P(B = TOOL | s = 1), pp, over completed B with known s."""
    done = completed(base)
    wrong, right = done & (s == 0), done & (s == 1)
    columns = (wrong & (base == TOOL), wrong, right & (base == TOOL), right)
    return _Statistic(
        columns,
        lambda x: _percent(x[:, 0], x[:, 1]) - _percent(x[:, 2], x[:, 3]),
        1,
    )


def _sealed_minus_open(table: ExperimentTable) -> _Statistic:
    """S_sealed - S (pp), each S over its own retained set I_S, from the same resampled problems."""
    plus, minus, _ = SHIPPED_PAIRS[PRIMARY_PAIR]
    s_plus, s_minus, _ = SHIPPED_PAIRS[SEALED_PAIR]
    open_ = sensitivity_indicators(table.actions(plus), table.actions(minus))
    sealed = sensitivity_indicators(table.actions(s_plus), table.actions(s_minus))
    return _Statistic(
        (*sealed, *open_),
        lambda x: swing(x[:, 1], x[:, 2], x[:, 0]) - swing(x[:, 4], x[:, 5], x[:, 3]),
        0,
    )


def _statistics(table: ExperimentTable) -> dict[str, _Statistic]:
    """Every ratio statistic the table's conditions allow, by name (stats/README.md)."""
    s, base = table.s, table.base
    found = {"unaided_accuracy": _rate(s == 1, s >= 0)}
    for code in table.known.report_order:
        actions = table.actions(code)
        if actions is not None:
            found[f"delegation.{code}"] = _rate(actions == TOOL, completed(actions))
    found["gamma"] = _gamma(s, base)
    empty, neutral = table.actions("empty"), table.actions("neutral")
    if empty is not None:
        found["empty_minus_B"] = _paired_difference(empty, base)
        if neutral is not None:
            found["neutral_minus_empty"] = _paired_difference(neutral, empty)
    graded = table.correct.get(TOOL_BASE)
    if graded is not None:
        kept = (base == SELF) & (graded >= 0) & (s >= 0)
        found["dself"] = _rate(kept & (s == 1) & (graded == 0), kept & (s == 1))
        found["rself"] = _rate(kept & (s == 0) & (graded == 1), kept & (s == 0))
    oracle = table.actions("oracle_B")
    if oracle is not None:
        found["rho"] = _rate(oracle == SELF, completed(oracle))
        known_self = (oracle == SELF) & (s >= 0)
        found["omega"] = _rate(known_self & (s == 0), known_self)
        found["phi"] = _paired_difference(oracle, base)
    if table.has_pair(SEALED_PAIR):
        found["sealed_minus_open"] = _sealed_minus_open(table)
    return found


def ratio_estimates(
    table: ExperimentTable, n_boot: int = 20000, seed: int = 0, confidence: float = 0.95
) -> dict[str, Estimate]:
    """Every ratio diagnostic of `table` with its percentile interval (module docstring).

    Units are problems (`table.cluster`): a sampled run's seeds of one problem are resampled
    together, as in bootstrap_clustered. Percentages and pp; NaN where undefined.
    """
    statistics = _statistics(table)
    blocks, starts = [], []
    for statistic in statistics.values():
        starts.append(len(blocks))  # one block per column
        blocks.extend(np.asarray(c, dtype=np.int64) for c in statistic.columns)
    rows = np.stack(blocks, axis=1) if blocks else np.zeros((len(table), 0), np.int64)
    units = aggregate_by_cluster(rows, table.cluster)
    totals = units.sum(axis=0, keepdims=True)
    replicates = resample_sums(units, n_boot, seed)
    out = {}
    for (name, statistic), start in zip(statistics.items(), starts):
        width = len(statistic.columns)
        point = float(statistic.formula(totals[:, start : start + width])[0])
        values = statistic.formula(replicates[:, start : start + width])
        out[name] = Estimate(
            point,
            percentile_interval(values, confidence),
            int(totals[0, start + statistic.n_column]),
        )
    return out
