"""Grounded nudges: signal AUROC and ECE, cross-fitting, grounded selection, sham, lift, intervals.

Each estimator is checked against a hand-worked table or a brute-force loop written here.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers.staged_kernels import draw_indices
from sklearn.metrics import roc_auc_score

from nudgeability.stats.actions import NONE, OTHER, SELF, TOOL, TRUNC
from nudgeability.stats.grounding.estimators import (
    delegation_accuracy,
    grounded_actions,
    grounded_arm,
    grounding_lift,
    policy_accuracies,
    retained_rows,
    sham_expectation,
)
from nudgeability.stats.grounding.join import agreement
from nudgeability.stats.grounding.signals import (
    auroc,
    auroc_replicates,
    auroc_weighted,
    crossfit,
    ece,
    fold_of,
    identity_fit,
    logistic_probe_fit,
)
from nudgeability.stats.resampling import kernels
from nudgeability.stats.resampling.bootstrap import Resamples, percentile_interval

S, T = SELF, TOOL


def brute_auroc(score, s):
    right = [x for x, y in zip(score, s) if y == 1 and np.isfinite(x)]
    wrong = [x for x, y in zip(score, s) if y == 0 and np.isfinite(x)]
    if not right or not wrong:
        return float("nan")
    total = 0.0
    for a in right:
        for b in wrong:
            total += 1.0 if a > b else 0.5 if a == b else 0.0
    return total / (len(right) * len(wrong))


def brute_ece(prob, s, bins=10):
    total, n = 0.0, 0
    for b in range(bins):
        members = [
            (p, y)
            for p, y in zip(prob, s)
            if y >= 0 and np.isfinite(p) and min(int(p * bins), bins - 1) == b
        ]
        if members:
            gap = abs(
                sum(y for _, y in members) / len(members)
                - sum(p for p, _ in members) / len(members)
            )
            total += len(members) * gap
            n += len(members)
    return total / n


def test_auroc_equals_brute_force_and_sklearn_with_ties_unknowns_and_nans():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(2, 40))
        score = rng.integers(0, 6, n).astype(float)  # many ties
        score[rng.random(n) < 0.1] = np.nan
        s = rng.choice([-1, 0, 1], n)
        expected = brute_auroc(score, s)
        got = auroc(score, s)
        if np.isnan(expected):
            assert np.isnan(got)
            continue
        assert got == pytest.approx(expected, abs=1e-12)
        keep = (s >= 0) & np.isfinite(score)
        assert got == pytest.approx(roc_auc_score(s[keep], score[keep]), abs=1e-12)


def test_weighted_auroc_equals_auroc_of_the_repeated_rows():
    rng = np.random.default_rng(4)
    score, s = rng.normal(size=30).round(1), rng.integers(0, 2, 30)
    weights = rng.integers(0, 4, size=(5, 30))
    for w, got in zip(weights, auroc_weighted(score, s, weights.astype(float))):
        rows = np.repeat(np.arange(30), w)
        assert got == pytest.approx(brute_auroc(score[rows], s[rows]), abs=1e-12)


def test_ece_equals_brute_force():
    rng = np.random.default_rng(5)
    for _ in range(30):
        n = int(rng.integers(1, 60))
        prob = rng.random(n)
        prob[rng.random(n) < 0.1] = 1.0  # the last bin is closed
        s = rng.choice([-1, 0, 1], n, p=[0.1, 0.45, 0.45])
        if not (s >= 0).any():
            continue
        assert ece(prob, s) == pytest.approx(brute_ece(prob, s), abs=1e-12)


def test_ece_hand_worked():
    # bin [0.2, 0.3): p 0.2, 0.2 with s 0, 1 -> |0.5 - 0.2| = 0.3 on 2 rows;
    # bin [0.9, 1]: p 0.9, 1.0 with s 1, 1 -> |1 - 0.95| = 0.05 on 2 rows. ECE = (0.6 + 0.1) / 4.
    assert ece(np.array([0.2, 0.2, 0.9, 1.0]), np.array([0, 1, 1, 1])) == pytest.approx(0.175)


# ---------------------------------------------------------------- the hand-worked grounding table

#            problem:  0    1    2    3    4    5
HAND = dict(
    s=np.array([1, 1, 0, 0, 1, 0]),
    base=np.array([S, T, S, T, S, S]),
    conf=np.array([S, S, S, T, T, S]),
    doubt=np.array([T, S, T, T, S, T]),
    score=np.array([0.9, 0.8, 0.2, 0.1, 0.3, 0.7]),
)


def test_grounded_selection_sham_and_lift_on_a_hand_worked_table():
    h = HAND
    says_right = h["score"] >= 0.5  # right, right, wrong, wrong, wrong, right
    grounded = grounded_actions(h["conf"], h["doubt"], says_right)
    assert grounded.tolist() == [S, S, T, T, S, S]
    keep = retained_rows(h["s"], h["base"], h["conf"], h["doubt"], h["score"])
    assert keep.all()
    # a* = S S T T S T: grounded hits 5 of 6, conf 3, doubt 5, B 3
    assert delegation_accuracy(grounded, h["s"], keep) == pytest.approx(5 / 6)
    assert delegation_accuracy(h["conf"], h["s"], keep) == pytest.approx(3 / 6)
    assert delegation_accuracy(h["doubt"], h["s"], keep) == pytest.approx(5 / 6)
    assert delegation_accuracy(h["base"], h["s"], keep) == pytest.approx(3 / 6)  # rows 0, 3, 4
    # q = 3/6: sham = 1/2 * 3/6 + 1/2 * 5/6 = 4/6; lift = 100 * (5/6 - 4/6)
    assert sham_expectation(h["conf"], h["doubt"], h["s"], says_right, keep) == pytest.approx(4 / 6)
    assert grounding_lift(h["conf"], h["doubt"], h["s"], says_right, keep) == pytest.approx(100 / 6)


def test_retained_set_drops_unknown_s_missing_arms_and_undefined_scores():
    s = np.array([1, -1, 0, 1, 0])
    base = np.array([S, S, NONE, S, T])
    conf = np.array([S, S, S, NONE, OTHER])
    doubt = np.array([T, T, T, T, TRUNC])
    score = np.array([1.0, 1.0, 1.0, 1.0, np.nan])
    assert retained_rows(s, base, conf, doubt, score).tolist() == [True, False, False, False, False]
    # OTHER and TRUNC are kept in I_D (without the NaN score) and count as misses
    keep = retained_rows(s, base, conf, doubt)
    assert keep.tolist() == [True, False, False, False, True]
    assert delegation_accuracy(conf, s, keep) == pytest.approx(1 / 2)


def test_sham_expectation_equals_the_average_over_every_random_assignment():
    """The sham with the grounded arm's proportions, enumerated: every way of giving conf to
    exactly m of the n retained problems, averaged (each assignment equally likely)."""
    rng = np.random.default_rng(6)
    for _ in range(20):
        n = 8
        s = rng.integers(0, 2, n)
        conf, doubt = rng.choice([S, T, OTHER], n), rng.choice([S, T, TRUNC], n)
        says_right = rng.random(n) < 0.5
        keep = np.ones(n, dtype=bool)
        m = int(says_right.sum())
        total, count = 0.0, 0
        for chosen in itertools.combinations(range(n), m):
            mask = np.zeros(n, dtype=bool)
            mask[list(chosen)] = True
            actions = np.where(mask, conf, doubt)
            total += np.mean(actions == np.where(s == 1, S, T))
            count += 1
        expected = total / count
        assert sham_expectation(conf, doubt, s, says_right, keep) == pytest.approx(expected)
        lift = grounding_lift(conf, doubt, s, says_right, keep)
        grounded = np.mean(np.where(says_right, conf, doubt) == np.where(s == 1, S, T))
        assert lift == pytest.approx(100 * (grounded - expected))


def test_agreement_of_samples_with_their_majority():
    assert agreement(["yes", "yes", "no", "yes"]) == 0.75
    assert agreement(["a", None, None, "b"]) == 0.25  # no answer counts in K, never agrees
    assert agreement([None, None]) == 0.0
    assert np.isnan(agreement([]))


# ---------------------------------------------------------------- bootstrap intervals


def test_intervals_equal_a_brute_force_resampling_loop():
    rng = np.random.default_rng(10)
    n, n_boot, seed = 25, 400, 11
    s = rng.choice([-1, 0, 1], n, p=[0.1, 0.4, 0.5])
    base, conf, doubt = (
        rng.choice([NONE, S, T, OTHER], n, p=[0.1, 0.4, 0.4, 0.1]) for _ in range(3)
    )
    says_right = rng.random(n) < 0.6
    score = rng.normal(size=n) + s
    cluster = np.arange(n)
    keep = retained_rows(s, base, conf, doubt)
    drawn = draw_indices(n, n_boot, kernels.seed_key(seed))
    da, lift, area = [], [], []
    for r in range(n_boot):
        rows = drawn[r]
        k = keep[rows]
        if not k.any():
            da.append(np.nan)
            lift.append(np.nan)
        else:
            da.append(delegation_accuracy(conf[rows], s[rows], k))
            lift.append(grounding_lift(conf[rows], doubt[rows], s[rows], says_right[rows], k))
        area.append(brute_auroc(score[rows], s[rows]))
    resamples = Resamples.draw(cluster, n_boot, seed)
    arm = grounded_arm("x", s, conf, doubt, says_right, keep, resamples)
    acc = policy_accuracies(s, {"conf": conf}, keep, resamples)["conf"]
    for got, values in ((acc.ci, da), (arm.lift_ci, lift)):
        want = percentile_interval(np.array(values))
        assert (got.low, got.high) == pytest.approx((want.low, want.high), abs=1e-9)
    boots = np.concatenate([auroc_weighted(score, s, w) for w in resamples.weights()])
    want = percentile_interval(np.array(area))
    got = percentile_interval(boots)
    assert (got.low, got.high) == pytest.approx((want.low, want.high), abs=1e-9)


# ---------------------------------------------------------------- cross-fitting


def test_folds_keep_a_problems_rows_together_and_are_balanced():
    cluster = np.repeat(np.arange(23), 3)
    folds = fold_of(cluster, 5, seed=2)
    for p in range(23):
        assert len(set(folds[cluster == p])) == 1
    sizes = np.bincount(folds[::3], minlength=5)
    assert sizes.max() - sizes.min() <= 1


def test_no_row_is_scored_by_a_fit_that_saw_its_problem():
    """A spy scorer records the problems it was fitted on and scores every row with its own call
    number, so each final score names the fit that produced it."""
    rng = np.random.default_rng(12)
    cluster = np.repeat(np.arange(30), 3)  # three seeds per problem
    s = np.repeat(rng.integers(0, 2, 30), 3)
    s[5] = -1  # an unknown label is scored but never trained on
    features = rng.normal(size=(90, 4))
    row_of = {tuple(f): i for i, f in enumerate(features)}
    seen: list[set] = []

    def spy_fit(x, y):
        rows = [row_of[tuple(r)] for r in x]
        assert (s[rows] >= 0).all()
        seen.append({int(cluster[i]) for i in rows})
        call = len(seen) - 1
        return lambda z: np.full(len(z), float(call))

    fit = crossfit(features, s, cluster, fit=spy_fit, k=5, seed=1)
    assert len(seen) == 5 and np.isfinite(fit.score).all()
    for i in range(90):
        assert cluster[i] not in seen[int(fit.score[i])], f"row {i} scored by a fit that saw it"
    # and every problem is left out of exactly one fit, so the folds cover every problem once
    assert all(sum(p not in fitted for fitted in seen) == 1 for p in range(30))


def test_probe_on_noise_has_chance_auroc_cross_fitted_but_not_when_leaking():
    """Features that identify each problem but carry no information about s: a probe scoring its
    own training problems would separate them perfectly. Cross-fitted, it must not."""
    rng = np.random.default_rng(13)
    problems, seeds, d = 120, 3, 300
    cluster = np.repeat(np.arange(problems), seeds)
    s = np.repeat(rng.integers(0, 2, problems), seeds)
    features = np.repeat(rng.normal(size=(problems, d)), seeds, axis=0)
    probe = logistic_probe_fit(c=10.0)
    honest = crossfit(features, s, cluster, fit=probe, k=5, seed=0)
    assert abs(auroc(honest.score, s) - 0.5) < 0.15
    # folds over rows instead of problems leak a problem's other seeds into its probe
    leaky = crossfit(features, s, np.arange(len(s)), fit=probe, k=5, seed=0)
    assert auroc(leaky.score, s) > 0.9


def test_thresholds_are_training_fold_medians():
    rng = np.random.default_rng(14)
    cluster = np.arange(40)
    score = rng.normal(size=40)
    s = rng.integers(0, 2, 40)
    fit = crossfit(score, s, cluster, fit=identity_fit, k=4, seed=3)
    for f in range(4):
        others = score[(fit.fold != f)]
        assert np.all(fit.threshold[fit.fold == f] == np.median(others))
    assert np.array_equal(fit.says_right, score >= fit.threshold)


def test_auroc_kernel_equals_its_numpy_twin_in_every_replicate():
    rng = np.random.default_rng(15)
    for n in (1, 2, 7, 60):
        cluster = np.repeat(np.arange(n), 2)  # two seeds per problem
        score = rng.integers(0, 5, 2 * n).astype(float)
        score[rng.random(2 * n) < 0.1] = np.nan
        s = rng.choice([-1, 0, 1], 2 * n)
        resamples = Resamples.draw(cluster, 300, seed=n)
        kernel = auroc_replicates(score, s, resamples)
        twin = np.concatenate([auroc_weighted(score, s, w) for w in resamples.weights()])
        assert np.array_equal(kernel, twin, equal_nan=True)
