"""McNemar's exact and continuity-corrected tests against statsmodels, and their building blocks against scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar

from nudgeability.stats import NONE, OTHER, SELF, TOOL, TRUNC, mcnemar
from nudgeability.stats.estimators.mcnemar import binomial_two_sided_p, chi2_sf_1dof


def _paired_table(conf, doubt):
    """The 2x2 table of TOOL indicators over I_S, built independently of the package."""
    kept = [
        (c, d) for c, d in zip(conf, doubt) if c in (SELF, TOOL, OTHER) and d in (SELF, TOOL, OTHER)
    ]
    table = np.zeros((2, 2), dtype=int)
    for c, d in kept:
        table[int(c == TOOL), int(d == TOOL)] += 1
    return table


def test_mcnemar_matches_statsmodels_exact_and_corrected_chi2():
    rng = np.random.default_rng(7)
    for _trial in range(60):
        n = int(rng.integers(5, 400))
        conf = rng.choice([NONE, SELF, TOOL, OTHER, TRUNC], size=n, p=rng.dirichlet(np.ones(5)))
        doubt = rng.choice([NONE, SELF, TOOL, OTHER, TRUNC], size=n, p=rng.dirichlet(np.ones(5)))
        table = _paired_table(conf, doubt)
        ours = mcnemar(conf, doubt)
        assert (ours.b, ours.c, ours.n) == (table[1, 0], table[0, 1], table.sum())
        if ours.b + ours.c == 0:
            continue
        exact = sm_mcnemar(table, exact=True)
        chi2 = sm_mcnemar(table, exact=False, correction=True)
        assert ours.p_exact == pytest.approx(exact.pvalue, rel=1e-9, abs=1e-300)
        assert ours.chi2 == pytest.approx(chi2.statistic, rel=1e-12)
        assert ours.p_chi2 == pytest.approx(chi2.pvalue, rel=1e-9, abs=1e-300)


def test_mcnemar_hand_worked_small_table():
    # I_S: (+TOOL, -SELF), (+TOOL, -SELF), (+TOOL, -TOOL), (+SELF, -SELF): b = 2, c = 0
    # exact p = 2 * P(X <= 0 | n = 2) = 2 * 1/4 = 0.5; chi2 = (|2 - 0| - 1)^2 / 2 = 0.5
    # p_chi2 = erfc(sqrt(0.25)) = erfc(0.5) = 0.4795
    result = mcnemar(
        np.array([TOOL, TOOL, TOOL, SELF, TRUNC]), np.array([SELF, SELF, TOOL, SELF, TOOL])
    )
    assert (result.n, result.b, result.c) == (4, 2, 0)
    assert result.p_exact == 0.5 and result.chi2 == 0.5
    assert result.p_chi2 == pytest.approx(0.4795001221869535, rel=1e-12)


def test_no_discordant_pair_gives_p_one_and_undefined_chi2():
    result = mcnemar(np.array([TOOL, SELF]), np.array([TOOL, SELF]))
    assert result.p_exact == 1.0 and math.isnan(result.chi2) and math.isnan(result.p_chi2)


def test_exact_binomial_tail_and_chi2_survival_match_scipy():
    for n in (1, 2, 7, 40, 333, 1500):
        for k in sorted({0, n // 5, n // 2, n}):
            want = min(1.0, 2 * sps.binom.cdf(k, n, 0.5))
            assert binomial_two_sided_p(k, n) == pytest.approx(want, rel=1e-9, abs=1e-300)
    for x in (0.0, 0.01, 0.5, 3.84, 10.0, 80.0):
        assert chi2_sf_1dof(x) == pytest.approx(sps.chi2.sf(x, 1), rel=1e-10, abs=1e-300)
