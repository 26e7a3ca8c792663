"""The nonparametric bootstrap over problems, independent of any statistic.

stats/README.md, "Intervals". Resampling units are problems (or, for a sampled run, clusters: a
problem with all its seeds). An estimator reduces each unit to a row of integer counts whose sums
give its statistics; `resample_sums` returns the sums of every replicate, and the estimator turns
them into statistics with its own formulas; `percentile_interval` reads the interval off the
replicates. Estimators whose statistics are not sums of unit rows (AUROC, ECE) weight rows by
`Resamples`, the same stream's draws counted per unit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..validation import check_resampling
from . import kernels

# Chunks of replicates keep a (replicates x rows) weight matrix near 2**22 entries.
_CHUNK_ENTRIES = 2**22


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


def percentile_interval(values: np.ndarray, confidence: float = 0.95) -> Interval:
    """The equal-tailed percentile interval of the finite values (linear interpolation, as
    numpy.percentile and scipy.stats.bootstrap(method='percentile')); a replicate in which the
    statistic is undefined (NaN) is left out."""
    _, confidence, _ = check_resampling(confidence=confidence)
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return NAN_INTERVAL
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(finite, [100.0 * alpha, 100.0 * (1.0 - alpha)])
    return Interval(float(low), float(high))


def aggregate_by_cluster(contrib: np.ndarray, cluster: np.ndarray) -> np.ndarray:
    """Sum the rows of each cluster: (n_clusters, C), clusters in ascending id order.

    Resampling clusters with all their rows is then the same as resampling these summed rows.
    """
    ids, inverse = np.unique(cluster, return_inverse=True)
    out = np.zeros((len(ids), contrib.shape[1]), dtype=np.int64)
    np.add.at(out, inverse, contrib)
    return out


def compress(units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct unit rows and each unit's type index: (types (K, C), unit_type (n,) int64).

    Problems with equal rows are interchangeable in the bootstrap, so the kernels count how often
    each type is drawn instead of adding rows: identical sums, far less memory traffic.
    """
    units = np.asarray(units, dtype=np.int64)
    if len(units) == 0:
        return np.zeros((0, units.shape[1]), dtype=np.int64), np.zeros(0, dtype=np.int64)
    low, high = units.min(axis=0), units.max(axis=0)
    radix = (high - low + 1).astype(object)
    if np.prod(radix) < 2**62:
        # Rows of small integers: one mixed-radix integer key per row, so that a 1-D unique
        # replaces the much slower row-wise unique.
        weights = np.cumprod([1] + [int(r) for r in radix[:-1]]).astype(np.int64)
        keys = (units - low) @ weights
        _, first, unit_type = np.unique(keys, return_index=True, return_inverse=True)
        types = units[first]
    else:
        types, unit_type = np.unique(units, axis=0, return_inverse=True)
    return np.ascontiguousarray(types, dtype=np.int64), unit_type.reshape(-1).astype(np.int64)


def resample_sums(units: np.ndarray, n_boot: int, seed: int, engine: str = "numba") -> np.ndarray:
    """(n_boot, C) int64: the column sums of each replicate's draw of n units (rows of `units`,
    (n, C) integer counts), by the numba kernel or its numpy twin (identical output)."""
    n_boot, _, engine = check_resampling(n_boot=n_boot, engine=engine)
    units = np.asarray(units, dtype=np.int64)
    if len(units) > kernels.MAX_UNITS:
        raise ValueError(
            f"{len(units)} resampling units exceed the kernel's limit of {kernels.MAX_UNITS}"
        )
    if len(units) == 0:
        return np.zeros((n_boot, units.shape[1]), dtype=np.int64)
    types, unit_type = compress(units)
    if len(types) < 2**16:
        unit_type = unit_type.astype(np.uint16)
    run = kernels.resample_sums if engine == "numba" else kernels.resample_sums_twin
    return run(types, unit_type, n_boot, kernels.seed_key(seed))


@dataclass(frozen=True, eq=False)
class Resamples:
    """The problem-level bootstrap of one experiment as row weights, drawn once and shared by
    every estimator whose statistic is not a sum of unit rows (AUROC, ECE, grounded arms).

    counts[r, u]: how often replicate r draws problem (cluster) u, from the same SplitMix64 stream
    as `resample_sums` (kernels.draw_counts, or its numpy twin); replicate r counts each row as
    often as its problem is drawn.
    """

    counts: np.ndarray  # (n_boot, n_units) int32
    unit: np.ndarray  # (rows,) the problem index of each row

    @classmethod
    def draw(cls, cluster, n_boot: int, seed: int, *, engine: str = "numba") -> Resamples:
        n_boot, _, engine = check_resampling(n_boot=n_boot, engine=engine)
        clusters, unit = np.unique(np.asarray(cluster), return_inverse=True)
        draw = kernels.draw_counts if engine == "numba" else kernels.draw_counts_twin
        return cls(draw(len(clusters), n_boot, kernels.seed_key(seed)), unit)

    @property
    def n_boot(self) -> int:
        return len(self.counts)

    def weights(self) -> Iterator[np.ndarray]:
        """Chunks of (replicates, rows) float32 row weights (about 2**22 entries each). Counts
        are small integers, so float32 holds them, and their sums below 2**24, exactly."""
        chunk = max(1, _CHUNK_ENTRIES // max(len(self.unit), 1))
        one_row_per_unit = len(self.unit) == self.counts.shape[1] and np.array_equal(
            self.unit, np.arange(len(self.unit))
        )
        for start in range(0, self.n_boot, chunk):
            counts = self.counts[start : start + chunk]
            yield (counts if one_row_per_unit else counts[:, self.unit]).astype(np.float32)
