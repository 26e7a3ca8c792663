"""Profile labels on hand-worked estimates and intervals (stats/README.md, "Profiles"), the
thresholds as `nudge stats` options, and the rule printed under the table."""

from __future__ import annotations

import math

import pytest

from nudgeability.stats import Interval, ProfileRule, profile_label

NAN = (math.nan, math.nan)
# (S, S interval, L, L interval) -> label under the defaults (10 pp, 5 pp) and interval-only (0, 0)
CASES = [
    # a provider-scale model: a big swing, targeting clearly but only slightly above random
    ((67.0, (60.0, 74.0)), (4.6, (0.5, 8.7)), "compliant", "selective"),
    ((67.0, (60.0, 74.0)), (12.0, (3.0, 21.0)), "selective", "selective"),
    ((25.0, (15.0, 35.0)), (-8.0, (-14.0, -2.0)), "misdirected", "misdirected"),
    ((25.0, (15.0, 35.0)), (-3.0, (-5.5, -0.5)), "compliant", "misdirected"),
    ((25.0, (15.0, 35.0)), (9.0, (-1.0, 19.0)), "compliant", "compliant"),  # L's interval holds 0
    ((25.0, (15.0, 35.0)), (math.nan, NAN), "compliant", "compliant"),  # no flip at all
    ((6.0, (2.0, 10.0)), (20.0, (10.0, 30.0)), "inert", "selective"),  # clear but small swing
    ((3.0, (-2.0, 8.0)), (20.0, (10.0, 30.0)), "inert", "inert"),  # no reliable swing
    ((-15.0, (-22.0, -8.0)), (0.0, (-5.0, 5.0)), "contrarian", "contrarian"),
    ((-4.0, (-7.0, -1.0)), (0.0, (-5.0, 5.0)), "inert", "contrarian"),  # reliably < 0 but small
    ((10.0, (1.0, 19.0)), (5.0, (1.0, 9.0)), "selective", "selective"),  # exactly at both bars
    ((math.nan, NAN), (1.0, (0.5, 2.0)), "undetermined", "undetermined"),
]


@pytest.mark.parametrize("s,lift,default_label,interval_label", CASES)
def test_profile_rule_on_hand_worked_intervals(s, lift, default_label, interval_label):
    S, S_ci, L, L_ci = s[0], Interval(*s[1]), lift[0], Interval(*lift[1])
    assert profile_label(S, S_ci, L, L_ci) == default_label
    assert ProfileRule(min_S=0, min_L=0).label(S, S_ci, L, L_ci) == interval_label


def test_thresholds_are_validated():
    with pytest.raises(ValueError, match="min_S"):
        ProfileRule(min_S=-1)
    with pytest.raises(ValueError, match="min_L"):
        ProfileRule(min_L=math.inf)


def test_the_rule_is_written_with_its_thresholds():
    text = ProfileRule(min_S=12.5, min_L=3).describe()
    assert "min |S| = 12.5 pp" in text and "min |L| = 3 pp" in text
    assert "S <= -12.5" in text and "L >= 3," in text
