"""McNemar's test on the paired (+, -) TOOL indicators over I_S.

stats/README.md, "Intervals": over the problems with both arms completed, count the discordant pairs

    b = #(A_+ = TOOL, A_- != TOOL)      c = #(A_+ != TOOL, A_- = TOOL)

- exact p = min(1, 2 * P(X <= min(b, c))), X ~ Binomial(b + c, 1/2), summed exactly in integers;
- chi2 = (|b - c| - 1)^2 / (b + c) (continuity corrected), p = P(chi2_1 >= chi2) = erfc(sqrt(chi2/2)).

These are the conventions of statsmodels.stats.contingency_tables.mcnemar(exact=True) and
mcnemar(exact=False, correction=True). With no discordant pair, p_exact = 1 and chi2 is NaN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .sensitivity import sensitivity_indicators


@dataclass(frozen=True)
class McNemar:
    """Discordant counts and both p-values of McNemar's test."""

    n: int  # retained problems, |I_S|
    b: int  # TOOL under + only
    c: int  # TOOL under - only
    p_exact: float
    chi2: float
    p_chi2: float


def binomial_two_sided_p(k: int, n: int) -> float:
    """min(1, 2 * P(X <= k)) for X ~ Binomial(n, 1/2), from an exact integer sum."""
    if n < 0 or k < 0:
        raise ValueError(f"binomial_two_sided_p needs k, n >= 0, got k={k}, n={n}")
    tail = sum(math.comb(n, i) for i in range(min(k, n) + 1))
    return min(1.0, 2 * tail / 2**n)


def chi2_sf_1dof(x: float) -> float:
    """P(chi2 with one degree of freedom >= x) = erfc(sqrt(x / 2)); NaN for NaN."""
    if math.isnan(x):
        return float("nan")
    return math.erfc(math.sqrt(max(x, 0.0) / 2.0))


def mcnemar_from_counts(b: int, c: int, n: int | None = None) -> McNemar:
    """McNemar's exact and corrected chi2 tests from the discordant counts b and c."""
    b, c = int(b), int(c)
    discordant = b + c
    chi2 = (abs(b - c) - 1.0) ** 2 / discordant if discordant else float("nan")
    return McNemar(
        n=discordant if n is None else int(n),
        b=b,
        c=c,
        p_exact=binomial_two_sided_p(min(b, c), discordant),
        chi2=chi2,
        p_chi2=chi2_sf_1dof(chi2),
    )


def mcnemar(conf: np.ndarray, doubt: np.ndarray) -> McNemar:
    """McNemar's test of the paired TOOL indicators of the + and - arms over I_S."""
    in_s, minus_tool, plus_tool = sensitivity_indicators(conf, doubt)
    b = int((plus_tool & ~minus_tool).sum())
    c = int((minus_tool & ~plus_tool).sum())
    return mcnemar_from_counts(b, c, n=int(in_s.sum()))
