"""Grounded nudges: delegation accuracy of policies, the sham reference and the grounding lift.

A *policy* gives each problem an action; its **delegation accuracy** is the share of retained
problems whose action is the ideal one, a*(s) = SELF if s = 1 else TOOL. OTHER and TRUNC never
equal a*, so they count as misses. The retained set I_D holds the rows with s known and a
recorded base, confidence and doubt arm (B closed its thinking), so that every policy is scored
on the same rows; rows where a used signal is undefined are left out too.

Policies: B (the base action), conf, doubt, and for each signal a **grounded arm**: the confidence
arm's recorded action where the cross-fitted signal says "likely right" (signals.CrossFit), the
doubt arm's otherwise. Nothing new is generated; in a sampled run each row keeps its own seed.

The **sham arm** assigns conf or doubt at random, independently of the problem, in the grounded
arm's proportions: q = share of I_D given conf. Its expected delegation accuracy is exact
(as WTrand is for targeting), never simulated:

    E[sham] = q * DA(conf) + (1 - q) * DA(doubt)

and the **grounding lift** is 100 * (DA(grounded) - E[sham]) in pp. Writing g_i for "given conf",
c_i = 1[A_+(i) = a*(s_i)] and d_i = 1[A_-(i) = a*(s_i)], the lift is 100 * mean((g - q)(c - d)):
it is positive exactly when the signal sends the confidence sentence to the problems where it
lands better than doubt, and 0 for a signal unrelated to that.

Intervals: percentile intervals of the problem-level bootstrap (clusters = problems with all their
seeds); q and the sham are recomputed in every replicate, the cross-fitted assignments are held
fixed (the probe is not refitted per replicate).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..actions import NONE
from ..estimators.targeting import ideal_action
from ..resampling.bootstrap import Interval, Resamples, percentile_interval


def retained_rows(s, base, conf, doubt, *scores) -> np.ndarray:
    """I_D: s known, base, conf and doubt recorded, every given score finite."""
    keep = (np.asarray(s) >= 0) & (np.asarray(base) != NONE)
    keep &= (np.asarray(conf) != NONE) & (np.asarray(doubt) != NONE)
    for score in scores:
        keep &= np.isfinite(np.asarray(score, dtype=np.float64))
    return keep


def matches_ideal(actions: np.ndarray, s: np.ndarray) -> np.ndarray:
    """1 where the action equals a*(s) (s known), else 0."""
    s = np.asarray(s)
    return ((np.asarray(actions) == ideal_action(s)) & (s >= 0)).astype(np.int64)


def grounded_actions(conf: np.ndarray, doubt: np.ndarray, says_right: np.ndarray) -> np.ndarray:
    """The grounded arm: conf's action where the signal says likely right, doubt's elsewhere."""
    return np.where(np.asarray(says_right, dtype=bool), conf, doubt).astype(np.int8)


def delegation_accuracy(actions, s, retained) -> float:
    """Share of retained rows whose action equals a*(s); NaN when none is retained."""
    retained = np.asarray(retained, dtype=bool)
    n = int(retained.sum())
    return float(matches_ideal(actions, s)[retained].sum() / n) if n else float("nan")


def sham_expectation(conf, doubt, s, says_right, retained) -> float:
    """E[DA] of the sham arm: q DA(conf) + (1 - q) DA(doubt), q = share given conf."""
    retained = np.asarray(retained, dtype=bool)
    n = int(retained.sum())
    if not n:
        return float("nan")
    q = np.asarray(says_right, dtype=bool)[retained].mean()
    return float(
        q * delegation_accuracy(conf, s, retained)
        + (1 - q) * delegation_accuracy(doubt, s, retained)
    )


def grounding_lift(conf, doubt, s, says_right, retained) -> float:
    """100 * (DA(grounded) - E[sham]) in pp."""
    grounded = grounded_actions(conf, doubt, says_right)
    return 100.0 * (
        delegation_accuracy(grounded, s, retained)
        - sham_expectation(conf, doubt, s, says_right, retained)
    )


# ---------------------------------------------------------------- with intervals


def _weighted_share(weights: np.ndarray, hits: np.ndarray, retained: np.ndarray) -> np.ndarray:
    # integer-valued sums, exact in the weights' float32, divided in float64
    total = (weights @ retained.astype(weights.dtype)).astype(np.float64)
    hit = (weights @ (hits * retained).astype(weights.dtype)).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, hit / total, np.nan)


@dataclass(frozen=True)
class PolicyAccuracy:
    """Delegation accuracy of one policy (fraction) with its interval, on n retained rows."""

    policy: str
    accuracy: float
    ci: Interval
    n: int


@dataclass(frozen=True)
class GroundedArm:
    """One signal's grounded arm against its sham: accuracies, q, lift (pp) and intervals."""

    signal: str
    accuracy: float
    accuracy_ci: Interval
    sham: float
    sham_ci: Interval
    lift: float
    lift_ci: Interval
    share_conf: float  # q
    n: int


def policy_accuracies(
    s, actions: dict[str, np.ndarray], retained, resamples: Resamples
) -> dict[str, PolicyAccuracy]:
    """Delegation accuracy of each named action array on the retained rows, with intervals."""
    retained = np.asarray(retained, dtype=bool)
    hits = {name: matches_ideal(a, s) for name, a in actions.items()}
    replicates = {name: [] for name in actions}
    for weights in resamples.weights():
        for name, h in hits.items():
            replicates[name].append(_weighted_share(weights, h, retained))
    return {
        name: PolicyAccuracy(
            name,
            delegation_accuracy(actions[name], s, retained),
            percentile_interval(np.concatenate(replicates[name])),
            int(retained.sum()),
        )
        for name in actions
    }


def grounded_arm(
    signal: str, s, conf, doubt, says_right, retained, resamples: Resamples
) -> GroundedArm:
    """The grounded arm of one signal, its sham and lift, with problem-bootstrap intervals."""
    retained = np.asarray(retained, dtype=bool)
    given = np.asarray(says_right, dtype=bool) & retained
    c, d = matches_ideal(conf, s), matches_ideal(doubt, s)
    grounded = grounded_actions(conf, doubt, given)
    g = matches_ideal(grounded, s)
    acc, sham = [], []
    for weights in resamples.weights():
        q = _weighted_share(weights, given.astype(np.int64), retained)
        acc.append(_weighted_share(weights, g, retained))
        sham.append(
            q * _weighted_share(weights, c, retained)
            + (1 - q) * _weighted_share(weights, d, retained)
        )
    acc, sham = np.concatenate(acc), np.concatenate(sham)
    n = int(retained.sum())
    return GroundedArm(
        signal=signal,
        accuracy=delegation_accuracy(grounded, s, retained),
        accuracy_ci=percentile_interval(acc),
        sham=sham_expectation(conf, doubt, s, given, retained),
        sham_ci=percentile_interval(sham),
        lift=grounding_lift(conf, doubt, s, given, retained),
        lift_ci=percentile_interval(100.0 * (acc - sham)),
        share_conf=float(given[retained].mean()) if n else float("nan"),
        n=n,
    )
