"""Targeting: are the flips induced by the sentence the competence-appropriate ones? WT, WTrand, L.

Definitions (stats/README.md, "Flips and targeting"). For polarity nu in {+, -}, problem i is
*eligible* when s_i is known, A_B(i) in {SELF, TOOL} and A_nu(i) in {SELF, TOOL}; transitions that
involve OTHER or TRUNC (or a missing arm) are left out of numerator and denominator alike.

    flip            A_nu(i) != A_B(i)
    well-targeted   a flip with A_nu(i) = a*(s_i), a*(1) = SELF, a*(0) = TOOL;
                    equivalently a flip with A_B(i) != a*(s_i)

Flip events are counted per polarity (a problem flipping under both + and - counts twice).
The matched random reference keeps each stratum (nu, b), b = base action:

    N_nu,b = eligible problems with A_B = b        F_nu,b = flips among them
    K_nu,b = eligible problems with a*(s) != b     H_nu,b = well-targeted flips among them
    WT     = sum H / sum F
    WTrand = sum_{nu,b} F_nu,b * K_nu,b / N_nu,b  /  sum F
    L      = 100 * (WT - WTrand)                   (pp; 0 = random-level targeting)

WT, WTrand and L are NaN when there is no flip at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..actions import SELF, TOOL, decisive
from ..validation import same_shape

# The four strata in a fixed order; the WTrand sum runs in this order in every code path.
STRATA = (("+", SELF), ("+", TOOL), ("-", SELF), ("-", TOOL))


@dataclass(frozen=True)
class Stratum:
    """Counts of one (polarity, base action) stratum."""

    polarity: str  # "+" or "-"
    base: str  # "SELF" or "TOOL"
    N: int  # eligible problems
    F: int  # flips
    K: int  # eligible problems whose flip would be well-targeted (a*(s) != base)
    H: int  # well-targeted flips


@dataclass(frozen=True)
class Targeting:
    """WT and WTrand as fractions, L in pp, with the flip events F, well-targeted flips H,
    n_WT (problems eligible under at least one polarity), n_events (sum of N over strata) and
    the four strata."""

    WT: float
    WTrand: float
    L: float
    F: int
    H: int
    n_WT: int
    n_events: int
    strata: tuple[Stratum, ...]


def ideal_action(s: np.ndarray) -> np.ndarray:
    """a*(s): SELF where s = 1, TOOL where s = 0, -1 where s is unknown."""
    s = np.asarray(s)
    return np.where(s == 1, SELF, np.where(s == 0, TOOL, -1)).astype(np.int8)


def stratum_indicators(
    s, base, arm, b: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-problem booleans (eligible, flip, K-member, well-targeted flip) of stratum (arm, b)."""
    s, base, arm = same_shape(s=s, base=base, arm=arm)
    eligible = (s >= 0) & decisive(base) & decisive(arm) & (base == b)
    flip = eligible & (arm != base)
    k = eligible & (ideal_action(s) != b)
    return eligible, flip, k, flip & k


def targeting_from_counts(N, F, K, H):
    """(WT, WTrand, L) from stratum counts whose last axis runs over STRATA (length 4).

    Works on arrays of any leading shape; NaN where there is no flip. The float operations are
    the ones the bootstrap kernel performs, in the same order.
    """
    N, F, K, H = (np.asarray(x, dtype=np.int64) for x in (N, F, K, H))
    f_total = F.sum(axis=-1).astype(np.float64)
    h_total = H.sum(axis=-1).astype(np.float64)
    expected = np.zeros(f_total.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        for j in range(len(STRATA)):
            term = (F[..., j] * K[..., j]).astype(np.float64) / N[..., j].astype(np.float64)
            expected = expected + np.where(N[..., j] > 0, term, 0.0)
        wt = np.where(f_total > 0, h_total / f_total, np.nan)
        wt_rand = np.where(f_total > 0, expected / f_total, np.nan)
    return wt[()], wt_rand[()], (100.0 * (wt - wt_rand))[()]


def targeting(s: np.ndarray, base: np.ndarray, conf: np.ndarray, doubt: np.ndarray) -> Targeting:
    """WT, WTrand, L and the flip counts per stratum (see module docstring).

    Example: s = [1, 0], base = [SELF, SELF], conf = [TOOL, TOOL], doubt = [SELF, SELF] gives
    one (+, SELF) stratum with N = 2, F = 2, K = 1, H = 1: WT = 1/2, WTrand = 2*1/2 / 2 = 1/2, L = 0.
    """
    rows, any_eligible = [], np.zeros(np.shape(s), dtype=bool)
    for polarity, b in STRATA:
        arm = conf if polarity == "+" else doubt
        eligible, flip, k, h = stratum_indicators(s, base, arm, b)
        any_eligible |= eligible
        rows.append(
            Stratum(
                polarity,
                "SELF" if b == SELF else "TOOL",
                int(eligible.sum()),
                int(flip.sum()),
                int(k.sum()),
                int(h.sum()),
            )
        )
    counts = [[getattr(r, q) for r in rows] for q in "NFKH"]
    wt, wt_rand, lift = targeting_from_counts(*counts)
    return Targeting(
        WT=float(wt),
        WTrand=float(wt_rand),
        L=float(lift),
        F=sum(r.F for r in rows),
        H=sum(r.H for r in rows),
        n_WT=int(any_eligible.sum()),
        n_events=sum(r.N for r in rows),
        strata=tuple(rows),
    )
