"""Planted-effect simulation for grounded nudges: the intervals cover the true signal AUROC and
the true grounding lift in at least 93% of 1,000 simulated experiments.

The planted world: s = 1 with probability P_RIGHT; the signal is Normal(MU[s], 1), so its true
AUROC is Phi((MU[1] - MU[0]) / sqrt(2)); the confidence and doubt arms' actions depend on s only.
The grounded arm thresholds the signal at the cross-fitted training median (as the run's stats
do), whose population limit is the median m of the signal's mixture distribution; the true lift
follows from P(signal >= m | s) in closed form (below).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm

from nudgeability.stats.actions import OTHER, SELF, TOOL
from nudgeability.stats.grounding.estimators import grounded_arm, retained_rows
from nudgeability.stats.grounding.signals import auroc_weighted, crossfit, identity_fit
from nudgeability.stats.resampling.bootstrap import Resamples, percentile_interval

EXPERIMENTS = 1000
PROBLEMS = 400
# 500 replicates per experiment keep 1,000 bootstraps to seconds; fewer replicates add Monte
# Carlo noise to the ends of each interval but leave the coverage of the procedure unchanged
# (see tests/stats/test_coverage.py for the same choice).
REPLICATES = 500
P_RIGHT = 0.6
MU = {0: 0.0, 1: 1.0}
# P(action | s) over SELF, TOOL, OTHER for each arm: a compliant model that also tracks s a bit.
CONF = {1: [0.85, 0.12, 0.03], 0: [0.70, 0.27, 0.03]}
DOUBT = {1: [0.40, 0.57, 0.03], 0: [0.25, 0.72, 0.03]}


def truth() -> tuple[float, float]:
    """(true AUROC, true lift in pp) by the closed forms of the planted world."""
    true_auroc = float(norm.cdf((MU[1] - MU[0]) / np.sqrt(2)))
    p = {1: P_RIGHT, 0: 1 - P_RIGHT}

    def above(m):  # P(signal >= m)
        return sum(p[v] * norm.sf(m - MU[v]) for v in p)

    m = brentq(lambda x: above(x) - 0.5, -10, 10)
    ideal = {1: SELF, 0: TOOL}
    hit_conf = {v: CONF[v][ideal[v]] for v in p}
    hit_doubt = {v: DOUBT[v][ideal[v]] for v in p}
    given = {v: norm.sf(m - MU[v]) for v in p}  # P(conf | s)
    grounded = sum(p[v] * (given[v] * hit_conf[v] + (1 - given[v]) * hit_doubt[v]) for v in p)
    q = sum(p[v] * given[v] for v in p)  # = 1/2 at the median
    sham = q * sum(p[v] * hit_conf[v] for v in p) + (1 - q) * sum(p[v] * hit_doubt[v] for v in p)
    return true_auroc, 100 * (grounded - sham)


def sample(rng: np.random.Generator, n: int):
    s = (rng.random(n) < P_RIGHT).astype(np.int8)
    signal = rng.normal(size=n) + np.where(s == 1, MU[1], MU[0])
    conf, doubt = np.empty(n, np.int8), np.empty(n, np.int8)
    for v in (0, 1):
        rows = s == v
        conf[rows] = rng.choice([SELF, TOOL, OTHER], rows.sum(), p=CONF[v])
        doubt[rows] = rng.choice([SELF, TOOL, OTHER], rows.sum(), p=DOUBT[v])
    return s, signal, conf, doubt


def test_intervals_cover_true_auroc_and_true_lift_in_at_least_93_percent():
    true_auroc, true_lift = truth()
    rng = np.random.default_rng(2025)
    cluster = np.arange(PROBLEMS)
    covered_auroc = covered_lift = 0
    lifts = []
    for k in range(EXPERIMENTS):
        s, signal, conf, doubt = sample(rng, PROBLEMS)
        fit = crossfit(signal, s, cluster, fit=identity_fit, k=5, seed=k)
        keep = retained_rows(s, conf, conf, doubt)
        resamples = Resamples.draw(cluster, REPLICATES, k)
        arm = grounded_arm("x", s, conf, doubt, fit.says_right, keep, resamples)
        boots = [auroc_weighted(signal, s, w) for w in resamples.weights()]
        covered_auroc += percentile_interval(np.concatenate(boots)).covers(true_auroc)
        covered_lift += arm.lift_ci.covers(true_lift)
        lifts.append(arm.lift)
    print(
        f"coverage over {EXPERIMENTS}: AUROC {covered_auroc}, lift {covered_lift}; "
        f"true AUROC {true_auroc:.3f}, true lift {true_lift:.2f} pp, mean lift {np.mean(lifts):.2f}"
    )
    assert covered_auroc >= 0.93 * EXPERIMENTS, covered_auroc
    assert covered_lift >= 0.93 * EXPERIMENTS, covered_lift
    # the planted effects are real, so coverage is not trivial
    assert true_auroc > 0.7 and true_lift > 3
