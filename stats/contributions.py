"""Per-problem contributions: the integer columns whose sums give S, WT, WTrand and L.

Every estimator of a (+, -) pair is a ratio of sums over problems, so each problem (or cluster of
rows) reduces to one row of small integers. A bootstrap replicate only has to add up the rows of
the resampled problems; the kernels in `kernels.py` never see action codes.

Layout (N_COLUMNS = 20):

    IN_S, TOOL_MINUS, TOOL_PLUS          sensitivity (see sensitivity.py)
    3 + 4*j + (N, F, K, H)               stratum j of targeting.STRATA (see targeting.py)
    ELIGIBLE_ANY                         eligible under at least one polarity (n_WT)
"""

from __future__ import annotations

import numpy as np

from .sensitivity import sensitivity_indicators
from .targeting import STRATA, stratum_indicators

IN_S, TOOL_MINUS, TOOL_PLUS = 0, 1, 2
N_OFF, F_OFF, K_OFF, H_OFF = 0, 1, 2, 3
STRATA_START = 3
ELIGIBLE_ANY = STRATA_START + 4 * len(STRATA)
N_COLUMNS = ELIGIBLE_ANY + 1


def stratum_columns(quantity_offset: int) -> list[int]:
    """The four columns (one per stratum, in STRATA order) of N, F, K or H."""
    return [STRATA_START + 4 * j + quantity_offset for j in range(len(STRATA))]


def contributions(
    s: np.ndarray, base: np.ndarray, conf: np.ndarray, doubt: np.ndarray
) -> np.ndarray:
    """An int64 (n, N_COLUMNS) matrix: each problem's contribution to the pair's counts."""
    n = len(s)
    out = np.zeros((n, N_COLUMNS), dtype=np.int64)
    in_s, minus, plus = sensitivity_indicators(conf, doubt)
    out[:, IN_S], out[:, TOOL_MINUS], out[:, TOOL_PLUS] = in_s, minus, plus
    any_eligible = np.zeros(n, dtype=bool)
    for j, (polarity, b) in enumerate(STRATA):
        arm = conf if polarity == "+" else doubt
        eligible, flip, k, h = stratum_indicators(s, base, arm, b)
        col = STRATA_START + 4 * j
        out[:, col + N_OFF], out[:, col + F_OFF], out[:, col + K_OFF], out[:, col + H_OFF] = (
            eligible,
            flip,
            k,
            h,
        )
        any_eligible |= eligible
    out[:, ELIGIBLE_ANY] = any_eligible
    return out


def aggregate_by_cluster(contrib: np.ndarray, cluster: np.ndarray) -> np.ndarray:
    """Sum the rows of each cluster: (n_clusters, N_COLUMNS), clusters in ascending id order.

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
