"""Delegation value: what the sentences do to final accuracy once the tool's result is used.

The resolution phase (`nudge run --resolve`) executes every TOOL record's call and lets the model
finish; these estimators read the outcome. Every array is one entry per row (problem, seed).

**Final outcome** of a row under condition c (`final_outcome`): 1 right, 0 wrong, -1 missing.

    SELF          the answer as graded (an ungradeable answer is wrong); -1 when not graded
    TOOL          the resolved answer as graded (ungradeable, a second call, or a truncated or
                  malformed resolution turn is wrong); -1 when the call has no resolution
    OTHER, TRUNC  wrong
    no record     -1 (missing)

**Final accuracy** of c: 100 * #right / #retained, retained = rows whose outcome is not missing.

**Value swing** of a (+, -) pair, in pp: on I_V, the rows with both outcomes retained,

    V = 100 * ( mean_{I_V} 1[final_- = 1] - mean_{I_V} 1[final_+ = 1] ).

The outcome counterpart of S: V > 0 means doubt leaves more right answers than confidence.

**Flip value.** The flip events are WT's (estimators/targeting.py): for polarity nu, a row is
eligible when s is known, A_B and A_nu are SELF or TOOL and both final outcomes are retained; a
flip is A_nu != A_B, counted per polarity. A flip is *helpful* when the final answer goes from wrong (B)
to right (arm), *harmful* from right to wrong. Per stratum (nu, b), b = base action:

    N  eligible rows with A_B = b          F  flips among them
    W  eligible rows whose B outcome is wrong
    R  flips whose arm outcome is right    HP, HM  helpful, harmful flips
    helpful = sum HP / sum F               harmful = sum HM / sum F

**Matched random reference** (the counterpart of WTrand): the same F flips of each stratum are
placed at random among its N eligible rows, each flip keeping the outcome it reached (right for
R of them); the row it lands on decides where it starts (wrong with probability W / N). So

    helpful_rand = sum_{nu,b} R * W / N / sum F
    harmful_rand = sum_{nu,b} (F - R) * (N - W) / N / sum F.

helpful > helpful_rand means flips that end right land on B's failures more often than chance.

**Tool accuracy** of a tool: the share of its resolved answers that are right, pooled over every
condition's resolutions (an experiment is one task, so this is per tool and task).

Shares are fractions; accuracies and V are in percent / pp; NaN when undefined (no row).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..actions import NONE, OTHER, SELF, TOOL, TRUNC, action_kind, decisive
from ..estimators.sensitivity import swing
from ..estimators.targeting import STRATA
from ..resampling.bootstrap import NAN_INTERVAL, Interval
from ..validation import same_shape

RIGHT, WRONG, MISSING = 1, 0, -1
# Columns of one stratum in a flip-value count array (last axis: stratum, then quantity).
FLIP_QUANTITIES = ("N", "F", "W", "R", "HP", "HM")


@dataclass(frozen=True)
class FinalAccuracy:
    """Final accuracy (%) of one condition: `right` of `retained` rows."""

    accuracy: float
    right: int
    retained: int
    ci: Interval = NAN_INTERVAL


@dataclass(frozen=True)
class ValueSwing:
    """V (pp) of one pair on I_V, with n_V and the right answers under each polarity."""

    V: float
    n_V: int
    right_plus: int
    right_minus: int
    ci: Interval = NAN_INTERVAL


@dataclass(frozen=True)
class FlipStratum:
    """Counts of one (polarity, base action) stratum (names as in the module docstring)."""

    polarity: str
    base: str
    N: int
    F: int
    W: int
    R: int
    HP: int
    HM: int


@dataclass(frozen=True)
class FlipValue:
    """Helpful and harmful shares of the flip events and their matched random reference."""

    helpful: float
    harmful: float
    helpful_rand: float
    harmful_rand: float
    F: int
    HP: int
    HM: int
    strata: tuple[FlipStratum, ...]
    helpful_ci: Interval = NAN_INTERVAL
    harmful_ci: Interval = NAN_INTERVAL
    helpful_rand_ci: Interval = NAN_INTERVAL
    harmful_rand_ci: Interval = NAN_INTERVAL


@dataclass(frozen=True)
class ToolAccuracy:
    """Share of one tool's resolved answers that are right."""

    accuracy: float
    right: int
    resolved: int
    ci: Interval = NAN_INTERVAL


# ---------------------------------------------------------------- outcomes


def final_outcome(actions, answer_right) -> np.ndarray:
    """The final outcome (RIGHT, WRONG, MISSING) of each row from its action code and the grade of
    its final answer: `answer_right` is 1 right, 0 wrong, -1 ungradeable, -2 not available (a TOOL
    call without resolution, a SELF answer without grade). Rules in the module docstring."""
    actions, answer_right = same_shape(actions=actions, answer_right=answer_right)
    out = np.full(actions.shape, MISSING, dtype=np.int8)
    answered = ((actions == SELF) | (actions == TOOL)) & (answer_right != -2)
    out[answered] = np.where(answer_right[answered] == 1, RIGHT, WRONG)
    out[(actions == OTHER) | (actions == TRUNC)] = WRONG
    out[actions == NONE] = MISSING
    return out


# ---------------------------------------------------------------- indicators (per row)


def accuracy_indicators(final) -> tuple[np.ndarray, np.ndarray]:
    """Per-row booleans (retained, right)."""
    final = np.asarray(final)
    return final >= 0, final == RIGHT


def swing_indicators(final_plus, final_minus) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-row booleans (in I_V, right under - within I_V, right under + within I_V)."""
    final_plus, final_minus = np.asarray(final_plus), np.asarray(final_minus)
    both = (final_plus >= 0) & (final_minus >= 0)
    return both, both & (final_minus == RIGHT), both & (final_plus == RIGHT)


def flip_indicators(s, base, arm, final_base, final_arm, b: int) -> dict[str, np.ndarray]:
    """Per-row booleans of stratum (arm's polarity, b), keyed by FLIP_QUANTITIES."""
    s, base, arm = np.asarray(s), np.asarray(base), np.asarray(arm)
    final_base, final_arm = np.asarray(final_base), np.asarray(final_arm)
    eligible = (
        (s >= 0)
        & decisive(base)
        & decisive(arm)
        & (base == b)
        & (final_base >= 0)
        & (final_arm >= 0)
    )
    flip = eligible & (arm != base)
    return {
        "N": eligible,
        "F": flip,
        "W": eligible & (final_base == WRONG),
        "R": flip & (final_arm == RIGHT),
        "HP": flip & (final_base == WRONG) & (final_arm == RIGHT),
        "HM": flip & (final_base == RIGHT) & (final_arm == WRONG),
    }


# ---------------------------------------------------------------- statistics from summed counts
# Each works on arrays of any leading shape, so the point estimate (the column totals) and every
# bootstrap replicate (rows of resampled sums) go through the same float operations.


def accuracy_from_counts(right, retained):
    """100 * right / retained; NaN where retained = 0."""
    right, retained = (np.asarray(x, dtype=np.float64) for x in (right, retained))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(retained > 0, 100.0 * right / retained, np.nan)[()]


def share_from_counts(part, whole):
    """part / whole as a fraction; NaN where whole = 0."""
    part, whole = (np.asarray(x, dtype=np.float64) for x in (part, whole))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(whole > 0, part / whole, np.nan)[()]


def flip_value_from_counts(counts):
    """(helpful, harmful, helpful_rand, harmful_rand) from counts of shape (..., 4, 6): strata in
    STRATA order, quantities in FLIP_QUANTITIES order."""
    counts = np.asarray(counts, dtype=np.int64)
    n, f, w, r, hp, hm = (counts[..., q].astype(np.float64) for q in range(len(FLIP_QUANTITIES)))
    with np.errstate(divide="ignore", invalid="ignore"):
        helpful_expected = np.where(n > 0, r * w / n, 0.0).sum(axis=-1)
        harmful_expected = np.where(n > 0, (f - r) * (n - w) / n, 0.0).sum(axis=-1)
    total = f.sum(axis=-1)
    return (
        share_from_counts(hp.sum(axis=-1), total),
        share_from_counts(hm.sum(axis=-1), total),
        share_from_counts(helpful_expected, total),
        share_from_counts(harmful_expected, total),
    )


# ---------------------------------------------------------------- point estimates


def final_accuracy(final) -> FinalAccuracy:
    """Final accuracy of one condition's outcomes. Example: [1, 0, -1, 1] gives 2 of 3, 66.7%."""
    retained, right = accuracy_indicators(final)
    return FinalAccuracy(
        float(accuracy_from_counts(right.sum(), retained.sum())),
        int(right.sum()),
        int(retained.sum()),
    )


def value_swing(final_plus, final_minus) -> ValueSwing:
    """V of a pair. Example: + = [1, 1, 0], - = [1, 0, 1] gives n_V 3, V = 100 * (2/3 - 2/3) = 0."""
    both, minus, plus = swing_indicators(final_plus, final_minus)
    n, right_minus, right_plus = int(both.sum()), int(minus.sum()), int(plus.sum())
    return ValueSwing(float(swing(right_minus, right_plus, n)), n, right_plus, right_minus)


def flip_strata(s, base, conf, doubt, final_base, final_conf, final_doubt) -> np.ndarray:
    """The (4, 6) counts of every stratum of STRATA (quantities in FLIP_QUANTITIES order)."""
    out = np.zeros((len(STRATA), len(FLIP_QUANTITIES)), dtype=np.int64)
    for j, (polarity, b) in enumerate(STRATA):
        arm, final_arm = (conf, final_conf) if polarity == "+" else (doubt, final_doubt)
        found = flip_indicators(s, base, arm, final_base, final_arm, b)
        out[j] = [found[q].sum() for q in FLIP_QUANTITIES]
    return out


def flip_value(s, base, conf, doubt, final_base, final_conf, final_doubt) -> FlipValue:
    """Helpful / harmful shares of a pair's flip events and their matched random reference.

    Example: one (+, SELF) stratum of rows s = [1, 1], base SELF, conf [TOOL, SELF], B outcomes
    [0, 1], conf outcomes [1, 1]: N 2, F 1, W 1, R 1, HP 1; helpful 1, helpful_rand 1 * 1/2 = 0.5.
    """
    counts = flip_strata(s, base, conf, doubt, final_base, final_conf, final_doubt)
    helpful, harmful, helpful_rand, harmful_rand = flip_value_from_counts(counts)
    strata = tuple(
        FlipStratum(polarity, action_kind(b), *(int(x) for x in counts[j]))
        for j, (polarity, b) in enumerate(STRATA)
    )
    return FlipValue(
        float(helpful),
        float(harmful),
        float(helpful_rand),
        float(harmful_rand),
        F=int(counts[:, 1].sum()),
        HP=int(counts[:, 4].sum()),
        HM=int(counts[:, 5].sum()),
        strata=strata,
    )


def tool_accuracy(resolved, right) -> ToolAccuracy:
    """Share of resolved answers that are right, from per-row counts of one tool's resolutions."""
    n, k = int(np.sum(resolved)), int(np.sum(right))
    return ToolAccuracy(float(share_from_counts(k, n)), k, n)
