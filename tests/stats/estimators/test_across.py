"""Across experiments: Spearman rho against scipy, the paper's Table 1 medians, and the pooled flip composition."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats as sps

from nudgeability.stats import across_experiments, spearman

# Table 1 of the paper (paper-summary-zh.txt): open-weight models, (S, WT, L) per task.
TABLE_1 = {
    "musique": [
        (14.0, 58.2, 18.8),
        (22.4, 42.5, 1.9),
        (31.0, 41.7, 5.2),
        (38.3, 37.2, 6.8),
        (24.2, 36.9, -7.9),
        (66.5, 29.1, -0.4),
        (1.3, 33.3, -6.2),
        (3.7, 35.9, -2.2),
        (5.6, 27.3, -3.3),
    ],
    "strategyqa": [
        (22.2, 42.3, 1.4),
        (19.0, 39.5, 3.8),
        (33.9, 49.2, 2.9),
        (38.3, 54.7, 1.7),
        (7.3, 51.2, 5.9),
        (25.8, 30.6, 0.6),
        (17.3, 44.1, 11.1),
        (10.1, 42.9, 3.0),
        (7.2, 45.5, 2.0),
    ],
}


def test_spearman_matches_scipy_with_ties_and_drops_nan_pairs():
    rng = np.random.default_rng(4)
    for _ in range(50):
        n = int(rng.integers(3, 40))
        x = np.round(rng.normal(size=n), 1)  # rounding makes ties
        y = np.round(x + rng.normal(size=n), 1)
        assert spearman(x, y) == pytest.approx(sps.spearmanr(x, y).statistic, abs=1e-12)
    assert spearman([1, 2, np.nan, 4], [2, 1, 5, 3]) == pytest.approx(
        sps.spearmanr([1, 2, 4], [2, 1, 3]).statistic
    )
    assert math.isnan(spearman([1.0], [2.0])) and math.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_medians_and_spearman_reproduce_the_papers_table_1_summary():
    experiments = [
        SimpleNamespace(task=task, S=s, WT=wt / 100, L=lift)
        for task, rows in TABLE_1.items()
        for s, wt, lift in rows
    ]
    across = across_experiments(experiments)
    # The paper: MuSiQue median S 22.4, WT 36.9, L -0.4; StrategyQA 19.0, 44.1, 2.9;
    # pooled: a swing of 20.6 pp, WT 42%, L +2 pp (the median of 18 is the mean of the 9th and 10th).
    assert (
        across.medians["musique"].S,
        round(100 * across.medians["musique"].WT, 1),
        across.medians["musique"].L,
    ) == (22.4, 36.9, -0.4)
    assert (
        across.medians["strategyqa"].S,
        round(100 * across.medians["strategyqa"].WT, 1),
        across.medians["strategyqa"].L,
    ) == (19.0, 44.1, 2.9)
    pooled = across.medians["pooled"]
    assert (
        pooled.S == pytest.approx(20.6)
        and pooled.WT == pytest.approx(0.42)
        and pooled.L == pytest.approx(1.95)
    )
    assert pooled.n == 18
    # The paper reports rho = 0.13 from unrounded values; the rounded table gives 0.137.
    s, lift = [e.S for e in experiments], [e.L for e in experiments]
    assert across.spearman_S_L == pytest.approx(sps.spearmanr(s, lift).statistic, abs=1e-12)
    assert across.spearman_S_L == pytest.approx(0.13, abs=0.01)


def test_flip_composition_is_pooled_over_experiments_by_summing_events():
    """Hand-worked: 5 of 6 flips SELF->TOOL in one experiment, 1 of 4 in another: pooled 6/10,
    where the mean of the two shares would be 54%."""
    from nudgeability.stats import FlipComposition

    def experiment(task, flips):
        return SimpleNamespace(task=task, S=1.0, WT=0.5, L=0.0, flips=FlipComposition(*flips))

    across = across_experiments(
        [
            experiment("musique", (3, 2, 1, 0)),
            experiment("strategyqa", (1, 0, 2, 1)),
            experiment("strategyqa", (0, 0, 0, 0)),
        ]
    )
    pooled = across.medians["pooled"]
    assert (pooled.self_to_tool, pooled.flips) == (6, 10) and pooled.share_self_to_tool == 0.6
    sqa = across.medians["strategyqa"]
    assert (sqa.self_to_tool, sqa.flips, sqa.n) == (1, 4, 2)
    assert math.isnan(
        across_experiments([experiment("musique", (0, 0, 0, 0))])
        .medians["pooled"]
        .share_self_to_tool
    )
