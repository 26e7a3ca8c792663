"""Profile labels on hand-worked estimates and intervals (stats/README.md, "Profiles"), on the
paper's own Table 1, the thresholds as `nudge stats` options, and the rule printed under the table."""

from __future__ import annotations

import math

import pytest

from nudgeability.stats import Interval, ProfileRule, profile_label

NAN = (math.nan, math.nan)
# (S, S interval, L, L interval) -> label under the defaults (15 pp, 5 pp) and interval-only (0, 0)
CASES = [
    # a provider-scale model: a big swing, targeting clearly but only slightly above random
    ((67.0, (60.0, 74.0)), (4.6, (0.5, 8.7)), "compliant", "selective"),
    ((67.0, (60.0, 74.0)), (12.0, (3.0, 21.0)), "selective", "selective"),
    ((25.0, (15.0, 35.0)), (-8.0, (-14.0, -2.0)), "misdirected", "misdirected"),
    ((25.0, (15.0, 35.0)), (-3.0, (-5.5, -0.5)), "compliant", "misdirected"),
    ((25.0, (15.0, 35.0)), (9.0, (-1.0, 19.0)), "compliant", "compliant"),  # L's interval holds 0
    ((25.0, (15.0, 35.0)), (math.nan, NAN), "compliant", "compliant"),  # no flip at all
    # the paper's competence-aware ideal: a moderate swing, reliably above 0, with a large L
    ((6.0, (2.0, 10.0)), (20.0, (10.0, 30.0)), "selective", "selective"),
    ((12.0, (5.0, 19.0)), (2.0, (-3.0, 7.0)), "inert", "compliant"),  # small swing, random L
    ((3.0, (-2.0, 8.0)), (20.0, (10.0, 30.0)), "inert", "inert"),  # no reliable swing
    ((-15.0, (-22.0, -8.0)), (0.0, (-5.0, 5.0)), "contrarian", "contrarian"),
    ((-4.0, (-7.0, -1.0)), (0.0, (-5.0, 5.0)), "contrarian", "contrarian"),  # reliably < 0
    ((10.0, (1.0, 19.0)), (5.0, (1.0, 9.0)), "selective", "selective"),  # exactly at the L bar
    ((15.0, (8.0, 22.0)), (1.0, (-4.0, 6.0)), "compliant", "compliant"),  # exactly at the S bar
    ((math.nan, NAN), (1.0, (0.5, 2.0)), "undetermined", "undetermined"),
]


@pytest.mark.parametrize("s,lift,default_label,interval_label", CASES)
def test_profile_rule_on_hand_worked_intervals(s, lift, default_label, interval_label):
    S, S_ci, L, L_ci = s[0], Interval(*s[1]), lift[0], Interval(*lift[1])
    assert profile_label(S, S_ci, L, L_ci) == default_label
    assert ProfileRule(min_S=0, min_L=0).label(S, S_ci, L, L_ci) == interval_label


# The paper's Table 1 (S pp, WT %, L pp, † = L's 95% interval excludes 0; open-weight n = 1000,
# provider-served n = 250), copied from its text, with the label the paper's prose gives each row
# it names ("§ Profiles": GLM-Z1 near-inert, Gemma4-31B on MuSiQue inert, Gemma4-E4B on MuSiQue and
# the providers compliant, Qwen3-4B/14B/32B on MuSiQue and Gemma4-31B on StrategyQA selective,
# Gemma4-E2B on MuSiQue misdirected). Rows the paper does not name carry None.
TABLE_1 = [
    # model, task, n, S, L, dagger, the paper's label
    ("Qwen3-4B", "musique", 1000, 14.0, 18.8, True, "selective"),
    ("Qwen3-8B", "musique", 1000, 22.4, 1.9, False, None),
    ("Qwen3-14B", "musique", 1000, 31.0, 5.2, True, "selective"),
    ("Qwen3-32B", "musique", 1000, 38.3, 6.8, True, "selective"),
    ("Gemma4-E2B", "musique", 1000, 24.2, -7.9, True, "misdirected"),
    ("Gemma4-E4B", "musique", 1000, 66.5, -0.4, False, "compliant"),
    ("Gemma4-31B", "musique", 1000, 1.3, -6.2, False, "inert"),
    ("GLM-Z1-9B", "musique", 1000, 3.7, -2.2, False, "inert"),
    ("GLM-Z1-32B", "musique", 1000, 5.6, -3.3, False, "inert"),
    ("Qwen3-4B", "strategyqa", 1000, 22.2, 1.4, False, None),
    ("Qwen3-8B", "strategyqa", 1000, 19.0, 3.8, True, None),
    ("Qwen3-14B", "strategyqa", 1000, 33.9, 2.9, False, None),
    ("Qwen3-32B", "strategyqa", 1000, 38.3, 1.7, False, None),
    ("Gemma4-E2B", "strategyqa", 1000, 7.3, 5.9, False, None),
    ("Gemma4-E4B", "strategyqa", 1000, 25.8, 0.6, False, None),
    ("Gemma4-31B", "strategyqa", 1000, 17.3, 11.1, True, "selective"),
    ("GLM-Z1-9B", "strategyqa", 1000, 10.1, 3.0, False, "inert"),
    ("GLM-Z1-32B", "strategyqa", 1000, 7.2, 2.0, False, "inert"),
    ("DeepSeek-V4-Pro", "musique", 250, 66.8, 4.6, True, "compliant"),
    ("MiniMax-M3", "musique", 250, 66.4, 1.2, False, "compliant"),
    ("DeepSeek-V4-Pro", "strategyqa", 250, 70.0, -1.1, False, "compliant"),
    ("MiniMax-M3", "strategyqa", 250, 53.0, -0.1, False, "compliant"),
]
# What the default rule reads for the rows the paper leaves unnamed: a sizeable swing whose
# targeting is random-level or only slightly above (below the 5 pp bar) is compliant; Gemma4-E2B
# on StrategyQA (7.3 pp, L's interval holding 0) is a small swing: inert.
UNNAMED = {
    ("Qwen3-8B", "musique"): "compliant",
    ("Qwen3-4B", "strategyqa"): "compliant",
    ("Qwen3-8B", "strategyqa"): "compliant",
    ("Qwen3-14B", "strategyqa"): "compliant",
    ("Qwen3-32B", "strategyqa"): "compliant",
    ("Gemma4-E2B", "strategyqa"): "inert",
    ("Gemma4-E4B", "strategyqa"): "compliant",
}


def _s_intervals(S: float, n: int) -> list[Interval]:
    """Intervals of S the paper's n allows: from very narrow to the widest a paired difference of
    TOOL indicators can have (standard error <= 100/sqrt(n) pp, so half-width <= 196/sqrt(n))."""
    widest = 196.0 / math.sqrt(n)
    return [Interval(S - h, S + h) for h in (0.2, widest / 2, widest)]


def _l_intervals(L: float, dagger: bool) -> list[Interval]:
    """Intervals of L consistent with the row's †: excluding 0 on L's side (tight or reaching
    almost to 0), or holding 0 (tight around [L, 0] or wide)."""
    if dagger:
        near_zero = math.copysign(0.05, L)
        return [
            Interval(L - 0.1, L + 0.1),
            Interval(min(near_zero, 2 * L - near_zero), max(near_zero, 2 * L - near_zero)),
        ]
    return [Interval(min(L, 0.0) - 0.1, max(L, 0.0) + 0.1), Interval(L - 15.0, L + 15.0)]


@pytest.mark.parametrize("row", TABLE_1, ids=lambda r: f"{r[0]}-{r[1]}")
def test_the_default_rule_reads_table_1_as_the_paper_does(row):
    model, task, n, S, L, dagger, paper_label = row
    expected = paper_label or UNNAMED[(model, task)]
    for S_ci in _s_intervals(S, n):
        for L_ci in _l_intervals(L, dagger):
            assert L_ci.excludes_zero == dagger
            assert profile_label(S, S_ci, L, L_ci) == expected, (S_ci, L_ci)


def test_table_1_fills_every_profile_but_contrarian():
    """The paper: the experiments occupy every profile except contrarian (all S > 0)."""
    labels = {
        profile_label(S, _s_intervals(S, n)[0], L, _l_intervals(L, dagger)[0])
        for _, _, n, S, L, dagger, _ in TABLE_1
    }
    assert labels == {"inert", "compliant", "selective", "misdirected"}


def test_the_old_fixed_thresholds_disagreed_with_the_paper():
    """Why the rule changed: S-size first with a 10 pp bar read GLM-Z1-9B on StrategyQA
    (S = 10.1, L = 3.0) as compliant; the new rule reads it near-inert, and an S just past the
    bar with random-level targeting is still compliant."""
    S_ci, L_ci = Interval(6.0, 14.2), Interval(-2.0, 8.0)
    assert profile_label(10.1, S_ci, 3.0, L_ci) == "inert"
    assert ProfileRule(min_S=10).label(10.1, S_ci, 3.0, L_ci) == "compliant"


def test_thresholds_are_validated():
    with pytest.raises(ValueError, match="min_S"):
        ProfileRule(min_S=-1)
    with pytest.raises(ValueError, match="min_L"):
        ProfileRule(min_L=math.inf)


def test_the_rule_is_written_with_its_thresholds():
    text = ProfileRule(min_S=12.5, min_L=3).describe()
    assert "min |S| = 12.5 pp" in text and "min |L| = 3 pp" in text
    assert "compliant if S >= 12.5" in text and "L >= 3," in text
