"""Delegation-value estimators against brute-force loops written here, and their bootstrap."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from nudgeability.stats.actions import NONE, OTHER, SELF, TOOL, TRUNC
from nudgeability.stats.delegation.summary import summarize_value, value_contributions
from nudgeability.stats.delegation.table import ValueTable
from nudgeability.stats.delegation.value import (
    final_accuracy,
    final_outcome,
    flip_value,
    tool_accuracy,
    value_swing,
)
from nudgeability.stats.resampling import kernels
from nudgeability.stats.resampling.bootstrap import resample_sums


def test_final_outcome_rules_by_hand():
    actions = [SELF, SELF, SELF, SELF, TOOL, TOOL, TOOL, TOOL, OTHER, TRUNC, NONE]
    answers = [1, 0, -1, -2, 1, 0, -1, -2, 1, 1, 1]
    assert final_outcome(actions, answers).tolist() == [1, 0, 0, -1, 1, 0, 0, -1, 0, 0, -1]


# ---------------------------------------------------------------- brute-force references


def _random_case(rng, n):
    """s, actions of B/conf/doubt and final outcomes, every code at random frequencies."""
    codes = np.array([NONE, SELF, TOOL, OTHER, TRUNC], dtype=np.int8)
    s = rng.choice(np.array([-1, 0, 1], dtype=np.int8), size=n, p=rng.dirichlet(np.ones(3)))
    case = {"s": s}
    for name in ("B", "conf", "doubt"):
        actions = rng.choice(codes, size=n, p=rng.dirichlet(np.ones(5)))
        answers = rng.choice(np.array([1, 0, -1, -2]), size=n, p=rng.dirichlet(np.ones(4)))
        case[name] = actions
        case["final_" + name] = final_outcome(actions, answers)
    return case


def _brute_accuracy(final):
    kept = [x for x in final if x >= 0]
    return (100.0 * sum(x == 1 for x in kept) / len(kept)) if kept else math.nan, len(kept)


def _brute_swing(plus, minus):
    rows = [(p, m) for p, m in zip(plus, minus) if p >= 0 and m >= 0]
    if not rows:
        return math.nan, 0
    return 100.0 * (sum(m == 1 for _, m in rows) - sum(p == 1 for p, _ in rows)) / len(rows), len(
        rows
    )


def _brute_flips(case):
    """Per polarity and base action: lists of (flipped, B outcome, arm outcome) of eligible rows."""
    strata = {}
    for polarity, arm in (("+", "conf"), ("-", "doubt")):
        for i in range(len(case["s"])):
            b, a = int(case["B"][i]), int(case[arm][i])
            fb, fa = int(case["final_B"][i]), int(case["final_" + arm][i])
            if case["s"][i] < 0 or b not in (SELF, TOOL) or a not in (SELF, TOOL):
                continue
            if fb < 0 or fa < 0:
                continue
            strata.setdefault((polarity, b), []).append((a != b, fb, fa))
    return strata


def _brute_flip_value(case):
    strata = _brute_flips(case)
    flips = [r for rows in strata.values() for r in rows if r[0]]
    if not flips:
        return (math.nan,) * 4
    helpful = sum(fb == 0 and fa == 1 for _, fb, fa in flips) / len(flips)
    harmful = sum(fb == 1 and fa == 0 for _, fb, fa in flips) / len(flips)
    expected_help = expected_harm = 0.0
    for rows in strata.values():
        landing = [fb for _, fb, _ in rows]  # the B outcome of every row a flip may land on
        for _, _, fa in (r for r in rows if r[0]):
            # one flip, reaching outcome fa, lands on a row drawn uniformly from the stratum
            expected_help += sum(fa == 1 and fb == 0 for fb in landing) / len(landing)
            expected_harm += sum(fa == 0 and fb == 1 for fb in landing) / len(landing)
    return helpful, harmful, expected_help / len(flips), expected_harm / len(flips)


def _same(a, b):
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def test_point_estimates_equal_brute_force_loops_on_random_tables():
    rng = np.random.default_rng(7)
    for _ in range(150):
        case = _random_case(rng, int(rng.integers(0, 40)))
        for name in ("B", "conf", "doubt"):
            got = final_accuracy(case["final_" + name])
            want, kept = _brute_accuracy(case["final_" + name])
            assert _same(got.accuracy, want) and got.retained == kept
        got = value_swing(case["final_conf"], case["final_doubt"])
        want, n = _brute_swing(case["final_conf"], case["final_doubt"])
        assert _same(got.V, want) and got.n_V == n
        got = flip_value(
            case["s"],
            case["B"],
            case["conf"],
            case["doubt"],
            case["final_B"],
            case["final_conf"],
            case["final_doubt"],
        )
        want = _brute_flip_value(case)
        values = (got.helpful, got.harmful, got.helpful_rand, got.harmful_rand)
        assert all(_same(g, w) for g, w in zip(values, want)), (values, want)


def test_random_reference_equals_the_average_over_every_placement_of_the_flips():
    """Enumerate every way of placing a stratum's flips (with the outcomes they reached) on
    distinct rows of the stratum: the mean helpful / harmful counts are the reference's."""
    rng = np.random.default_rng(3)
    for _ in range(40):
        n = int(rng.integers(1, 7))
        s = np.ones(n, dtype=np.int8)
        base = np.full(n, SELF, dtype=np.int8)
        conf = rng.choice(np.array([SELF, TOOL], dtype=np.int8), size=n)
        doubt = np.full(n, NONE, dtype=np.int8)
        final_b = rng.integers(0, 2, size=n).astype(np.int8)
        final_c = rng.integers(0, 2, size=n).astype(np.int8)
        missing = np.full(n, -1, dtype=np.int8)
        got = flip_value(s, base, conf, doubt, final_b, final_c, missing)
        flipped = [i for i in range(n) if conf[i] != base[i]]
        if not flipped:
            assert math.isnan(got.helpful_rand)
            continue
        reached = [final_c[i] for i in flipped]
        help_total = harm_total = placements = 0
        for rows in itertools.permutations(range(n), len(flipped)):
            placements += 1
            help_total += sum(final_b[r] == 0 and a == 1 for r, a in zip(rows, reached))
            harm_total += sum(final_b[r] == 1 and a == 0 for r, a in zip(rows, reached))
        assert math.isclose(got.helpful_rand, help_total / placements / len(flipped))
        assert math.isclose(got.harmful_rand, harm_total / placements / len(flipped))


def test_flip_value_example_of_the_docstring():
    got = flip_value([1, 1], [SELF, SELF], [TOOL, SELF], [NONE, NONE], [0, 1], [1, 1], [-1, -1])
    assert (got.F, got.HP, got.HM, got.helpful, got.helpful_rand) == (1, 1, 0, 1.0, 0.5)


def test_tool_accuracy_pools_per_row_counts():
    got = tool_accuracy([2, 0, 1, 1], [1, 0, 1, 0])
    assert (got.right, got.resolved, got.accuracy) == (2, 4, 0.5)


# ---------------------------------------------------------------- the bootstrap


def _table(case, clusters=None):
    return ValueTable(
        s=case["s"],
        actions={c: case[c] for c in ("B", "conf", "doubt")},
        final={c: case["final_" + c] for c in ("B", "conf", "doubt")},
        tool_resolved={"retrieve": (case["final_B"] >= 0).astype(int)},
        tool_right={"retrieve": (case["final_B"] == 1).astype(int)},
        cluster=clusters,
    )


def test_bootstrap_kernel_equals_twin_and_a_brute_force_resampling_loop():
    case = _random_case(np.random.default_rng(5), 61)
    units, _ = value_contributions(_table(case))
    got = resample_sums(units, 300, seed=9)
    np.testing.assert_array_equal(got, resample_sums(units, 300, seed=9, engine="numpy"))
    indices = kernels.draw_indices_twin(len(units), 300, kernels.seed_key(9))
    brute = np.array([[units[i] for i in row] for row in indices]).sum(axis=1)
    np.testing.assert_array_equal(got, brute)


def test_intervals_are_the_percentiles_of_estimates_on_resampled_problems():
    """Resample problems with the kernel's own draws, recompute each estimator with the brute-force
    loops above on the resampled table, and take the 2.5 / 97.5 percentiles."""
    rng = np.random.default_rng(11)
    case = _random_case(rng, 40)
    clusters = np.repeat(np.arange(20), 2)  # two rows (seeds) per problem
    summary = summarize_value(_table(case, clusters), n_boot=400, seed=2)
    indices = kernels.draw_indices_twin(20, 400, kernels.seed_key(2))
    accuracy, swings, helpful = [], [], []
    for draw in indices:
        rows = np.concatenate([np.flatnonzero(clusters == k) for k in draw])
        sub = {key: value[rows] for key, value in case.items()}
        accuracy.append(_brute_accuracy(sub["final_doubt"])[0])
        swings.append(_brute_swing(sub["final_conf"], sub["final_doubt"])[0])
        helpful.append(_brute_flip_value(sub)[0])

    def interval(values):
        values = np.array(values, dtype=float)
        values = values[np.isfinite(values)]
        return tuple(np.percentile(values, [2.5, 97.5]))

    def close(ci, want):
        return math.isclose(ci.low, want[0], abs_tol=1e-9) and math.isclose(
            ci.high, want[1], abs_tol=1e-9
        )

    assert close(summary.accuracy["doubt"].ci, interval(accuracy))
    assert close(summary.swing["first"].ci, interval(swings))
    assert close(summary.flips["first"].helpful_ci, interval(helpful))
    assert summary.n_problems == 20 and summary.n_rows == 40


def test_value_table_rejects_arrays_of_another_length():
    with pytest.raises(ValueError, match=r"final\['conf'\]: length"):
        ValueTable(s=np.zeros(3), actions={"conf": np.zeros(3)}, final={"conf": np.zeros(2)})
    with pytest.raises(ValueError, match=r"final\['conf'\]: codes must lie in -1..1"):
        ValueTable(s=np.zeros(2), actions={"conf": np.zeros(2)}, final={"conf": np.array([0, 2])})


# ---------------------------------------------------------------- planted effect: coverage

EXPERIMENTS = 1000  # as tests/stats/test_coverage.py: 1,000 make the >= 93% criterion a real check
PROBLEMS = 400
REPLICATES = 1000  # enough for the interval ends; coverage is what is measured
P_EASY = 0.6
# P(final answer right | easy / hard) under confidence and doubt; doubt sends hard problems to a
# tool that often helps, and costs a little on easy ones.
RIGHT = {"conf": (0.80, 0.30), "doubt": (0.70, 0.65)}
P_MISSING = 0.04  # an arm without a record, independent of everything else


def test_value_swing_intervals_cover_the_planted_value_in_at_least_93_percent():
    true_v = 100.0 * sum(
        sign * (P_EASY * RIGHT[arm][0] + (1 - P_EASY) * RIGHT[arm][1])
        for sign, arm in ((1, "doubt"), (-1, "conf"))
    )
    rng = np.random.default_rng(2026)
    covered, estimates = 0, []
    for k in range(EXPERIMENTS):
        easy = rng.random(PROBLEMS) < P_EASY
        actions, final = {"B": np.full(PROBLEMS, SELF, np.int8)}, {"B": np.full(PROBLEMS, -1)}
        for arm, (p_easy, p_hard) in RIGHT.items():
            right = rng.random(PROBLEMS) < np.where(easy, p_easy, p_hard)
            missing = rng.random(PROBLEMS) < P_MISSING
            actions[arm] = np.where(missing, NONE, np.where(easy, SELF, TOOL)).astype(np.int8)
            final[arm] = np.where(missing, -1, right.astype(int))
        table = ValueTable(s=np.ones(PROBLEMS, np.int8), actions=actions, final=final)
        summary = summarize_value(table, n_boot=REPLICATES, seed=k)
        covered += summary.swing["first"].ci.covers(true_v)
        estimates.append(summary.swing["first"].V)
    print(f"value swing: true {true_v:.1f} pp, covered {covered}/{EXPERIMENTS}")
    assert covered >= 0.93 * EXPERIMENTS, covered
    assert abs(np.mean(estimates) - true_v) < 0.5  # unbiased around the planted value
    assert true_v > 5  # a real effect, so coverage is not trivial
