"""Response profiles: one label per experiment, read as the paper reads them.

stats/README.md, "Profiles". The paper names five profiles: inert (S ~ 0), contrarian (S < 0),
compliant (large S with L ~ 0), selective (L > 0) and misdirected (L < 0), and calls a moderate S
with a large L the competence-aware ideal. Targeting is what separates selective and misdirected
from the rest, whatever the size of the swing, so L is read before the size of S:

    undetermined  S has no interval (no retained problem)
    contrarian    S's interval lies below 0
    inert         S's interval reaches 0 (no reliable swing, so no flip pattern to read)
    (with S's interval above 0:)
    selective     L's interval lies above 0 and L >= min_L
    misdirected   L's interval lies below 0 and L <= -min_L
    compliant     S >= min_S (a large swing whose L is ~ 0, or no flip to judge)
    inert         otherwise (a small swing with random-level targeting: the paper's near-inert)

The two thresholds are the paper's own boundaries, read off its Table 1 (tests/stats/estimators/
test_profiles.py checks all 22 rows). min_L: DeepSeek-V4-Pro on MuSiQue (L = +4.6 pp, interval
above 0) is compliant while Qwen3-14B on MuSiQue (+5.2 pp, interval above 0) is selective, so the
bar lies in (4.6, 5.2]: 5 pp. min_S: GLM-Z1 up to S = 10.1 pp is near-inert, and the smallest
swing with random-level targeting that the paper reads as a response is larger than that; 15 pp
sits inside the bracket (10.1, 19.0] that Table 1 leaves, with room on both sides. Thresholds are
in percentage points; 0 and 0 give the interval-only reading.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..resampling.bootstrap import Interval

PROFILES = ("inert", "contrarian", "compliant", "selective", "misdirected")
DEFAULT_MIN_S = 15.0  # pp: above GLM-Z1's near-inert 10.1 pp (module docstring)
DEFAULT_MIN_L = 5.0  # pp: between DeepSeek's compliant +4.6 and Qwen3-14B's selective +5.2


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
        if S_ci.high < 0:
            return "contrarian"
        if not S_ci.low > 0:
            return "inert"
        if L_ci.low > 0 and L >= self.min_L:
            return "selective"
        if L_ci.high < 0 and L <= -self.min_L:
            return "misdirected"
        return "compliant" if S >= self.min_S else "inert"

    def describe(self) -> str:
        """The rule in one paragraph, with these thresholds (printed under the tables)."""
        s_pp, l_pp = _pp(self.min_S), _pp(self.min_L)
        return (
            f"Profile rule (95% intervals, min |S| = {s_pp} pp, min |L| = {l_pp} pp): contrarian if "
            "S's interval is below 0; inert if it reaches 0; otherwise selective if L's interval "
            f"is above 0 and L >= {l_pp}, misdirected if L's interval is below 0 and "
            f"L <= -{l_pp}, compliant if S >= {s_pp}, else inert (a small swing with "
            "random-level targeting)."
        )


def _pp(value: float) -> str:
    return f"{value:g}"


def profile_label(
    S: float, S_ci: Interval, L: float, L_ci: Interval, rule: ProfileRule | None = None
) -> str:
    """`rule.label(...)` with the default thresholds when no rule is given."""
    return (rule or ProfileRule()).label(S, S_ci, L, L_ci)
