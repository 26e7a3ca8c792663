"""Percentile bootstrap intervals: agreement with scipy, clustering, determinism and input errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from nudgeability.stats import (
    ExperimentTable,
    TableError,
    bootstrap,
    bootstrap_clustered,
    contributions,
)
from nudgeability.stats.estimators.contributions import (
    F_OFF,
    H_OFF,
    IN_S,
    K_OFF,
    N_OFF,
    TOOL_MINUS,
    TOOL_PLUS,
    stratum_columns,
)


def _scipy_interval(columns, statistic):
    result = sps.bootstrap(
        tuple(columns),
        statistic,
        paired=True,
        vectorized=True,
        n_resamples=20000,
        batch=1000,
        method="percentile",
        confidence_level=0.95,
        rng=np.random.default_rng(99),
    )
    return result.confidence_interval


def _quantile_tolerance(replicates: np.ndarray, lattice_step: float) -> float:
    """4 standard errors of the difference of two independent 2.5% (or 97.5%) quantile estimates
    from 20,000 replicates each, plus one lattice step of the statistic.

    SE of a p-quantile estimate from B draws = sqrt(p (1-p) / B) / f(q_p); with a normal-shaped
    bootstrap distribution of sd sigma, f(q_p) = phi(1.96) / sigma, so SE = 0.0189 sigma, and the
    difference of two independent estimates has SE sqrt(2) * 0.0189 sigma. Both methods interpolate
    between attainable values of a discrete statistic, which adds up to one lattice step.
    """
    sigma = float(np.nanstd(replicates))
    se = math.sqrt(0.025 * 0.975 / 20000) / sps.norm.pdf(1.96) * sigma
    return 4 * math.sqrt(2) * se + lattice_step


def test_bootstrap_interval_of_s_and_l_agrees_with_scipy_percentile_bootstrap(planted):
    arrays = planted.sample(np.random.default_rng(2024), 400)
    table = ExperimentTable(
        s=arrays["s"], base=arrays["base"], arms={"conf": arrays["conf"], "doubt": arrays["doubt"]}
    )
    ours = bootstrap(table, n_boot=20000, seed=1, keep_replicates=True)
    contrib = contributions(arrays["s"], arrays["base"], arrays["conf"], arrays["doubt"]).astype(
        np.float64
    )

    def s_statistic(in_s, minus, plus, axis=-1):
        n = in_s.sum(axis)
        return 100 * (minus.sum(axis) / n - plus.sum(axis) / n)

    def l_statistic(
        *cols, axis=-1
    ):  # cols: N, F, K, H of the four strata, written from stats/README.md
        N, F, K, H = ([cols[4 * q + j].sum(axis) for j in range(4)] for q in range(4))
        f_total = sum(F)
        wt_rand = (
            sum(np.where(n > 0, f * k / np.where(n > 0, n, 1), 0.0) for n, f, k in zip(N, F, K))
            / f_total
        )
        return 100 * (sum(H) / f_total - wt_rand)

    n_s = int(contrib[:, IN_S].sum())
    s_ci = _scipy_interval([contrib[:, c] for c in (IN_S, TOOL_MINUS, TOOL_PLUS)], s_statistic)
    tol_s = _quantile_tolerance(ours.replicates[:, 0], 100 / n_s)
    assert abs(ours.S.low - s_ci.low) <= tol_s and abs(ours.S.high - s_ci.high) <= tol_s
    strata_cols = [c for q in (N_OFF, F_OFF, K_OFF, H_OFF) for c in stratum_columns(q)]
    l_ci = _scipy_interval([contrib[:, c] for c in strata_cols], l_statistic)
    flips = int(contrib[:, stratum_columns(F_OFF)].sum())
    tol_l = _quantile_tolerance(ours.replicates[:, 3], 100 / flips)
    assert abs(ours.L.low - l_ci.low) <= tol_l and abs(ours.L.high - l_ci.high) <= tol_l
    # The tolerance is a small fraction of the interval: the comparison has teeth.
    assert tol_s < 0.15 * (ours.S.high - ours.S.low) and tol_l < 0.15 * (ours.L.high - ours.L.low)


def test_bootstrap_is_deterministic_for_a_seed_and_numba_equals_numpy_engine(planted):
    arrays = planted.sample(np.random.default_rng(8), 250)
    table = ExperimentTable(
        s=arrays["s"], base=arrays["base"], arms={"conf": arrays["conf"], "doubt": arrays["doubt"]}
    )
    first = bootstrap(table, n_boot=3000, seed=4)
    assert first == bootstrap(table, n_boot=3000, seed=4)
    assert first == bootstrap(table, n_boot=3000, seed=4, engine="numpy")
    assert first != bootstrap(table, n_boot=3000, seed=5)


def test_clustered_bootstrap_resamples_seeds_of_a_problem_together(planted):
    # Each problem repeated under 3 identical "seeds": clustering must give the single-seed
    # interval (the clusters' sums are 3x the rows', which leaves every ratio unchanged), while
    # treating the 3n rows as independent problems would shrink the interval by about sqrt(3).
    arrays = planted.sample(np.random.default_rng(10), 300)
    single = ExperimentTable(
        s=arrays["s"], base=arrays["base"], arms={"conf": arrays["conf"], "doubt": arrays["doubt"]}
    )
    rows = np.repeat(np.arange(300), 3)
    tripled = ExperimentTable(
        s=arrays["s"][rows],
        base=arrays["base"][rows],
        arms={"conf": arrays["conf"][rows], "doubt": arrays["doubt"][rows]},
        cluster=rows,
        seed=np.tile([0, 1, 2], 300),
    )
    one, clustered = bootstrap(single, 4000, seed=3), bootstrap_clustered(tripled, 4000, seed=3)
    for name in ("S", "WT", "WTrand", "L"):
        assert getattr(clustered, name).low == pytest.approx(
            getattr(one, name).low, rel=1e-12, abs=1e-12
        )
        assert getattr(clustered, name).high == pytest.approx(
            getattr(one, name).high, rel=1e-12, abs=1e-12
        )
    assert clustered.n_units == 300 and clustered.clustered
    naive = bootstrap_clustered(
        ExperimentTable(s=tripled.s, base=tripled.base, arms=tripled.arms), 4000, seed=3
    )
    width = lambda r: r.S.high - r.S.low  # noqa: E731
    assert width(naive) == pytest.approx(width(one) / math.sqrt(3), rel=0.15)
    with pytest.raises(TableError, match="bootstrap_clustered"):
        bootstrap(tripled)


def test_intervals_are_the_linear_2_5_and_97_5_percentiles_of_the_replicates(planted):
    arrays = planted.sample(np.random.default_rng(5), 200)
    table = ExperimentTable(
        s=arrays["s"], base=arrays["base"], arms={"conf": arrays["conf"], "doubt": arrays["doubt"]}
    )
    for confidence in (0.95, 0.9):
        result = bootstrap(table, n_boot=4001, seed=9, confidence=confidence, keep_replicates=True)
        tail = 100 * (1 - confidence) / 2
        for i, name in enumerate(("S", "WT", "WTrand", "L")):
            low, high = np.percentile(result.replicates[:, i], [tail, 100 - tail])
            assert (getattr(result, name).low, getattr(result, name).high) == (low, high)


def test_undefined_replicates_are_counted_and_left_out_of_the_interval():
    # One problem flips, three never do: replicates that miss the flipping problem have no flip.
    table = ExperimentTable(
        s=[0, 1, 1, 1], base=[0, 0, 0, 0], arms={"conf": [0, 0, 0, 0], "doubt": [1, 0, 0, 0]}
    )
    result = bootstrap(table, n_boot=2000, seed=0, keep_replicates=True)
    # P(no draw of the flipping problem) = (3/4)^4 = 0.316
    assert result.undefined["WT"] == pytest.approx(2000 * 0.75**4, rel=0.15)
    assert (
        result.undefined["WT"] == np.isnan(result.replicates[:, 1]).sum()
        and result.undefined["S"] == 0
    )
    assert result.WT.low == result.WT.high == 1.0
    s_low, s_high = np.percentile(result.replicates[:, 0], [2.5, 97.5])
    assert (result.S.low, result.S.high) == (s_low, s_high)


def test_bad_bootstrap_arguments_raise_value_errors():
    table = ExperimentTable(s=[1], base=[0], arms={"conf": [0], "doubt": [1]})
    with pytest.raises(ValueError, match="n_boot"):
        bootstrap(table, n_boot=0)
    with pytest.raises(ValueError, match="confidence"):
        bootstrap(table, confidence=95)
    with pytest.raises(ValueError, match="engine"):
        bootstrap(table, engine="gpu")
    with pytest.raises(TableError, match="sealed_conf"):
        bootstrap(table, pair="sealed")
