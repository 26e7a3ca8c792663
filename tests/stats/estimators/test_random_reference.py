"""WTrand (analytic sum F*K/N / sum F) against a Monte Carlo reallocation of the flips."""

from __future__ import annotations

import math

import numpy as np

from nudgeability.stats import SELF, TOOL, targeting


def test_wtrand_equals_the_mean_of_20000_random_reallocations_within_3_standard_errors(planted):
    # The matched random reference keeps, in each stratum (polarity, base action), the eligible
    # problems and the number of flips F, and lets the flips fall on F of the N eligible problems
    # uniformly at random, ignoring competence. Done literally here, 20,000 times.
    arrays = planted.sample(np.random.default_rng(31), 600)
    s, base = arrays["s"], arrays["base"]
    result = targeting(s, base, arrays["conf"], arrays["doubt"])
    rng = np.random.default_rng(32)
    draws = 20000
    well_targeted = np.zeros(draws)
    for arm in (arrays["conf"], arrays["doubt"]):
        for b in (SELF, TOOL):
            eligible = (
                (s >= 0) & np.isin(base, (SELF, TOOL)) & np.isin(arm, (SELF, TOOL)) & (base == b)
            )
            pool = np.flatnonzero(eligible)
            flips = int((arm[pool] != base[pool]).sum())
            if flips == 0:
                continue
            ideal = np.where(s[pool] == 1, SELF, TOOL)
            would_be_well = ideal != b  # a flip of this problem would be well-targeted
            # choose `flips` of the pool without replacement: the first `flips` of a random order
            chosen = np.argsort(rng.random((draws, len(pool))), axis=1)[:, :flips]
            well_targeted += would_be_well[chosen].sum(axis=1)
    wt_random = well_targeted / result.F
    se = wt_random.std(ddof=1) / math.sqrt(draws)
    assert abs(wt_random.mean() - result.WTrand) < 3 * se
    # and the analytic reference is not the observed WT of this (targeted) table
    assert abs(result.WT - result.WTrand) > 20 * se
