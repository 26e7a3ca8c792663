"""The intervals of a (+, -) pair: 95% percentile bootstrap intervals for S, WT, WTrand and L.

stats/README.md, "Intervals": resample whole problems with replacement, with all their arms;
recompute S, WT, WTrand and L in each of 20,000 replicates; report the 2.5% and 97.5% percentiles
(linear interpolation, as numpy.percentile and scipy.stats.bootstrap(method='percentile')).
For the sampled-decoding check, `bootstrap_clustered` resamples problems with all their seeds.

How it is computed. Each resampling unit (a problem, or a cluster = a problem with all its seeds)
is reduced to its contribution row (contributions.py); the resampling kernel
(resampling.bootstrap.resample_sums) draws n units per replicate and sums their rows; the four
statistics are evaluated on each replicate's sums by the estimators' formulas
(contributions.statistics_from_sums). This is the ordinary bootstrap, not an approximation:
drawing units and then adding their rows is exactly what the kernel does.

A replicate in which a statistic is undefined (no retained problem, or no flip) is left out of
that statistic's interval; `undefined` reports how many were.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..resampling.bootstrap import (
    Interval,
    aggregate_by_cluster,
    percentile_interval,
    resample_sums,
)
from ..table import ExperimentTable, TableError
from ..validation import check_resampling
from .contributions import STATISTICS, contributions, statistics_from_sums


@dataclass(frozen=True)
class BootstrapResult:
    """Percentile intervals of S (pp), WT and WTrand (fractions) and L (pp)."""

    S: Interval
    WT: Interval
    WTrand: Interval
    L: Interval
    n_boot: int
    seed: int
    confidence: float
    n_units: int  # problems (or clusters) resampled
    clustered: bool
    undefined: dict[str, int]  # replicates in which the statistic was undefined
    replicates: np.ndarray | None = field(default=None, repr=False)  # (n_boot, 4) if kept


def bootstrap_units(
    units: np.ndarray,
    n_boot: int = 20000,
    seed: int = 0,
    *,
    confidence: float = 0.95,
    clustered: bool = False,
    engine: str = "numba",
    keep_replicates: bool = False,
) -> BootstrapResult:
    """Bootstrap intervals from per-unit contribution rows (n_units, N_COLUMNS).

    engine: "numba" (the parallel kernel) or "numpy" (its twin; identical output, slower).
    """
    n_boot, confidence, engine = check_resampling(
        n_boot=n_boot, confidence=confidence, engine=engine
    )
    replicates = statistics_from_sums(resample_sums(units, n_boot, seed, engine))
    missing = np.isnan(replicates).sum(axis=0)
    undefined = {name: int(missing[i]) for i, name in enumerate(STATISTICS)}
    if missing.any():
        intervals = {
            name: percentile_interval(replicates[:, i], confidence)
            for i, name in enumerate(STATISTICS)
        }
    else:  # one partition pass for all four columns: the same percentiles, computed together
        alpha = 100.0 * (1.0 - confidence) / 2.0
        lows, highs = np.percentile(replicates, [alpha, 100.0 - alpha], axis=0)
        intervals = {
            name: Interval(float(lows[i]), float(highs[i])) for i, name in enumerate(STATISTICS)
        }
    return BootstrapResult(
        **intervals,
        n_boot=n_boot,
        seed=int(seed),
        confidence=confidence,
        n_units=len(units),
        clustered=clustered,
        undefined=undefined,
        replicates=replicates if keep_replicates else None,
    )


def pair_arrays(table: ExperimentTable, pair: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(base, conf, doubt) action arrays of a named pair (`table.known.pairs`); ValueError
    for an unknown pair, TableError for a pair whose conditions are absent."""
    pairs = table.known.pairs
    if pair not in pairs:
        raise ValueError(f"unknown pair {pair!r}: expected one of {', '.join(pairs)}")
    plus, minus, base = pairs[pair]
    arrays = [table.actions(code) for code in (base, plus, minus)]
    missing = [code for code, a in zip((base, plus, minus), arrays) if a is None]
    if missing:
        raise TableError(
            f"pair {pair!r} needs the condition(s) {', '.join(missing)}, absent from the table"
        )
    return arrays[0], arrays[1], arrays[2]


def bootstrap(
    table: ExperimentTable, n_boot: int = 20000, seed: int = 0, *, pair: str = "first", **options
) -> BootstrapResult:
    """Percentile intervals for S, WT, WTrand, L, resampling whole problems (one row each).

    A table with several seeds per problem must use bootstrap_clustered (or table.for_seed).
    options: confidence=0.95, engine="numba"|"numpy", keep_replicates=False.
    """
    if table.is_clustered:
        raise TableError("the table has several rows per problem (seeds): use bootstrap_clustered")
    base, conf, doubt = pair_arrays(table, pair)
    return bootstrap_units(contributions(table.s, base, conf, doubt), n_boot, seed, **options)


def bootstrap_clustered(
    table: ExperimentTable, n_boot: int = 20000, seed: int = 0, *, pair: str = "first", **options
) -> BootstrapResult:
    """As bootstrap, but resampling problems with all their seeds (rows sharing `table.cluster`).

    The point estimates are pooled over all rows; each replicate draws n_problems clusters.
    """
    base, conf, doubt = pair_arrays(table, pair)
    units = aggregate_by_cluster(contributions(table.s, base, conf, doubt), table.cluster)
    return bootstrap_units(units, n_boot, seed, clustered=True, **options)
