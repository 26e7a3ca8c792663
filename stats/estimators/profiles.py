"""Response profiles: one label per experiment from S, L, their 95% intervals and two thresholds.

stats/README.md, "Profiles". The paper names five profiles (inert S ~ 0, contrarian S < 0,
compliant large S with L ~ 0, selective L > 0, misdirected L < 0) but never says how large "large"
is. An interval alone cannot say it: with many problems a 5 pp swing or a 3 pp targeting gain is
statistically clear yet practically small, and a provider-scale model with S = 67 pp and
L = +4.6 pp (interval above 0) would read as *selective* where the paper reads it as compliant.
So each label needs the interval on the right side of 0 *and* the point estimate past a practical
threshold:

    undetermined  S has no interval (no retained problem)
    contrarian    S's interval lies below 0 and S <= -min_S
    inert         any other S that is not large: S's interval reaches 0, or |S| < min_S
    (with S's interval above 0 and S >= min_S, i.e. a large S:)
    selective     L's interval lies above 0 and L >= min_L
    misdirected   L's interval lies below 0 and L <= -min_L
    compliant     otherwise (L ~ 0, or no flip to judge)

Thresholds are in percentage points; 0 and 0 give the interval-only reading.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..resampling.bootstrap import Interval

PROFILES = ("inert", "contrarian", "compliant", "selective", "misdirected")
DEFAULT_MIN_S = 10.0  # pp: half the paper's pooled median swing (20.6 pp)
DEFAULT_MIN_L = 5.0  # pp: targeting within 5 pp of random reads as random-level


@dataclass(frozen=True)
class ProfileRule:
    """The practical thresholds of the profile labels, in pp (module docstring)."""

    min_S: float = DEFAULT_MIN_S
    min_L: float = DEFAULT_MIN_L

    def __post_init__(self) -> None:
        for name in ("min_S", "min_L"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"profile threshold {name}={value!r}: expected a number >= 0 (pp)")

    def label(self, S: float, S_ci: Interval, L: float, L_ci: Interval) -> str:
        """The profile of an experiment with sensitivity S and targeting L (pp) and their
        intervals; one of PROFILES, or "undetermined"."""
        if math.isnan(S_ci.low) or math.isnan(S_ci.high):
            return "undetermined"
        if S_ci.high < 0 and S <= -self.min_S:
            return "contrarian"
        if not (S_ci.low > 0 and S >= self.min_S):
            return "inert"
        if L_ci.low > 0 and L >= self.min_L:
            return "selective"
        if L_ci.high < 0 and L <= -self.min_L:
            return "misdirected"
        return "compliant"

    def describe(self) -> str:
        """The rule in one paragraph, with these thresholds (printed under the tables)."""
        s_pp, l_pp = _pp(self.min_S), _pp(self.min_L)
        return (
            f"Profile rule (95% intervals, min |S| = {s_pp} pp, min |L| = {l_pp} pp): contrarian if S's "
            f"interval is below 0 and S <= -{s_pp}; inert unless S's interval is above 0 and "
            f"S >= {s_pp}; then selective if L's interval is above 0 and L >= {l_pp}, misdirected if "
            f"L's interval is below 0 and L <= -{l_pp}, else compliant."
        )


def _pp(value: float) -> str:
    return f"{value:g}"


def profile_label(
    S: float, S_ci: Interval, L: float, L_ci: Interval, rule: ProfileRule | None = None
) -> str:
    """`rule.label(...)` with the default thresholds when no rule is given."""
    return (rule or ProfileRule()).label(S, S_ci, L, L_ci)
