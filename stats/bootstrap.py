"""Nonparametric bootstrap: 95% percentile intervals for S, WT, WTrand and L.

stats/README.md, "Intervals": resample whole problems with replacement, with all their arms;
recompute S, WT, WTrand and L in each of 20,000 replicates; report the 2.5% and 97.5% percentiles
(linear interpolation, as numpy.percentile and scipy.stats.bootstrap(method='percentile')).
For the sampled-decoding check, `bootstrap_clustered` resamples problems with all their seeds.

How it is computed. Each resampling unit (a problem, or a cluster = a problem with all its seeds)
is reduced to its contribution row (contributions.py); equal rows are merged into types; the
kernel (kernels.bootstrap_statistics) draws n units per replicate, counts the draws per type and
evaluates the four statistics on the summed counts. This is the ordinary bootstrap, not an
approximation: drawing units and then adding their rows is exactly what the kernel does.

A replicate in which a statistic is undefined (no retained problem, or no flip) is left out of
that statistic's interval; `undefined` reports how many were.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import kernels
from .action_table import PAIRS, ExperimentTable, TableError
from .contributions import aggregate_by_cluster, compress, contributions


@dataclass(frozen=True)
class Interval:
    """A confidence interval [low, high]; NaN ends when it cannot be computed."""

    low: float
    high: float

    @property
    def excludes_zero(self) -> bool:
        """True when the whole interval lies strictly on one side of 0."""
        return bool(self.low > 0 or self.high < 0)

    def covers(self, value: float) -> bool:
        return bool(self.low <= value <= self.high)


NAN_INTERVAL = Interval(float("nan"), float("nan"))


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


def percentile_interval(values: np.ndarray, confidence: float = 0.95) -> Interval:
    """The equal-tailed percentile interval of the finite values (linear interpolation)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return NAN_INTERVAL
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(finite, [100.0 * alpha, 100.0 * (1.0 - alpha)])
    return Interval(float(low), float(high))


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
    if int(n_boot) < 1:
        raise ValueError(f"n_boot must be a positive number of replicates, got {n_boot}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    if engine not in ("numba", "numpy"):
        raise ValueError(f"engine must be 'numba' or 'numpy', got {engine!r}")
    n_units = len(units)
    if n_units > kernels.MAX_UNITS:
        raise ValueError(
            f"{n_units} resampling units exceed the kernel's limit of {kernels.MAX_UNITS}"
        )
    if n_units == 0:
        replicates = np.full((int(n_boot), kernels.N_STATISTICS), np.nan)
    else:
        types, unit_type = compress(units)
        if len(types) < 2**16:
            unit_type = unit_type.astype(np.uint16)
        run = (
            kernels.bootstrap_statistics if engine == "numba" else kernels.bootstrap_statistics_twin
        )
        replicates = run(types, unit_type, int(n_boot), kernels.seed_key(seed))
    missing = np.isnan(replicates).sum(axis=0)
    undefined = {name: int(missing[i]) for i, name in enumerate(kernels.STATISTICS)}
    if missing.any():
        intervals = {
            name: percentile_interval(replicates[:, i], confidence)
            for i, name in enumerate(kernels.STATISTICS)
        }
    else:  # one partition pass for all four columns: the same percentiles, computed together
        alpha = 100.0 * (1.0 - confidence) / 2.0
        lows, highs = np.percentile(replicates, [alpha, 100.0 - alpha], axis=0)
        intervals = {
            name: Interval(float(lows[i]), float(highs[i]))
            for i, name in enumerate(kernels.STATISTICS)
        }
    return BootstrapResult(
        **intervals,
        n_boot=int(n_boot),
        seed=int(seed),
        confidence=confidence,
        n_units=n_units,
        clustered=clustered,
        undefined=undefined,
        replicates=replicates if keep_replicates else None,
    )


def pair_arrays(table: ExperimentTable, pair: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(base, conf, doubt) action arrays of a named pair (see table.PAIRS); ValueError if absent."""
    if pair not in PAIRS:
        raise ValueError(f"unknown pair {pair!r}: expected one of {', '.join(PAIRS)}")
    plus, minus, base = PAIRS[pair]
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
