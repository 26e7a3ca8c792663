"""Per-problem contributions: the integer columns whose sums give S, WT, WTrand and L.

Every estimator of a (+, -) pair is a ratio of sums over problems, so each problem (or cluster of
rows) reduces to one row of small integers. A bootstrap replicate only has to add up the rows of
the resampled problems (resampling/, which never sees action codes), and `statistics_from_sums`
turns any sums into S, WT, WTrand and L by the estimators' own formulas (sensitivity.swing,
targeting.targeting_from_counts): the point estimate and every replicate take one route.

Layout (N_COLUMNS = 20):

    IN_S, TOOL_MINUS, TOOL_PLUS          sensitivity (see sensitivity.py)
    3 + 4*j + (N, F, K, H)               stratum j of targeting.STRATA (see targeting.py)
    ELIGIBLE_ANY                         eligible under at least one polarity (n_WT)
"""

from __future__ import annotations

import numpy as np

from .sensitivity import sensitivity_indicators, swing
from .targeting import STRATA, stratum_indicators, targeting_from_counts

IN_S, TOOL_MINUS, TOOL_PLUS = 0, 1, 2
N_OFF, F_OFF, K_OFF, H_OFF = 0, 1, 2, 3
STRATA_START = 3
ELIGIBLE_ANY = STRATA_START + 4 * len(STRATA)
N_COLUMNS = ELIGIBLE_ANY + 1
STATISTICS = ("S", "WT", "WTrand", "L")  # the columns of every statistics array


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


def statistics_from_sums(sums: np.ndarray) -> np.ndarray:
    """(n, 4) float64 of S, WT, WTrand, L (STATISTICS) from (n, N_COLUMNS) count sums; NaN where
    a statistic is undefined (no retained problem, no flip)."""
    sums = np.asarray(sums, dtype=np.int64)
    out = np.empty((sums.shape[0], len(STATISTICS)), dtype=np.float64)
    out[:, 0] = swing(sums[:, TOOL_MINUS], sums[:, TOOL_PLUS], sums[:, IN_S])
    counts = [sums[:, stratum_columns(offset)] for offset in (N_OFF, F_OFF, K_OFF, H_OFF)]
    out[:, 1], out[:, 2], out[:, 3] = targeting_from_counts(*counts)
    return out
