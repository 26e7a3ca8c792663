"""Supporting diagnostics: Gamma, delegation rates and controls, flip composition, Dself/Rself, oracle.

Conventions shared by all (stats/README.md, "Supporting diagnostics"), where the protocol leaves a
choice open they are fixed here:
- a *delegation rate* is #TOOL / #completed (SELF, TOOL or OTHER): OTHER counts as not-TOOL and
  TRUNC or missing arms are dropped, as for S;
- a *difference of rates* between two conditions is taken over the problems where both are
  completed (paired, like S), in pp.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..actions import SELF, TOOL, completed
from .targeting import targeting


@dataclass(frozen=True)
class Rate:
    """numerator / denominator, as a fraction and in percent (NaN when the denominator is 0)."""

    numerator: int
    denominator: int

    @property
    def fraction(self) -> float:
        return self.numerator / self.denominator if self.denominator else float("nan")

    @property
    def percent(self) -> float:
        return 100.0 * self.fraction


def delegation_rate(actions: np.ndarray) -> Rate:
    """#TOOL / #completed actions of one condition."""
    actions = np.asarray(actions)
    return Rate(int((actions == TOOL).sum()), int(completed(actions).sum()))


def paired_rate_difference(first: np.ndarray, second: np.ndarray) -> tuple[float, int]:
    """100 * (P(first = TOOL) - P(second = TOOL)) over problems where both completed; (pp, n)."""
    first, second = np.asarray(first), np.asarray(second)
    both = completed(first) & completed(second)
    n = int(both.sum())
    if n == 0:
        return float("nan"), 0
    return 100.0 * (
        int((both & (first == TOOL)).sum()) / n - int((both & (second == TOOL)).sum()) / n
    ), n


@dataclass(frozen=True)
class Gamma:
    """Gamma = P(A_B = TOOL | s = 0) - P(A_B = TOOL | s = 1), in pp, with both rates."""

    gamma: float
    tool_if_wrong: Rate
    tool_if_right: Rate


def gamma(s: np.ndarray, base: np.ndarray) -> Gamma:
    """Natural delegation targeting with no sentence inserted, over known s and completed A_B."""
    s, base = np.asarray(s), np.asarray(base)
    kept = completed(base)
    wrong = delegation_rate(np.where(kept & (s == 0), base, -1))
    right = delegation_rate(np.where(kept & (s == 1), base, -1))
    return Gamma(100.0 * (wrong.fraction - right.fraction), wrong, right)


@dataclass(frozen=True)
class ControlDeltas:
    """|empty - B| and neutral - empty delegation differences, in pp, with their paired counts."""

    empty_vs_base: float
    n_empty_vs_base: int
    neutral_vs_empty: float
    n_neutral_vs_empty: int


def control_deltas(
    base: np.ndarray, empty: np.ndarray | None, neutral: np.ndarray | None
) -> ControlDeltas:
    """The cut-and-regenerate control |empty - B| and the neutral control 0 - empty (NaN if absent)."""
    d_empty, n_empty = (
        paired_rate_difference(empty, base) if empty is not None else (float("nan"), 0)
    )
    d_neutral, n_neutral = (
        paired_rate_difference(neutral, empty)
        if empty is not None and neutral is not None
        else (float("nan"), 0)
    )
    return ControlDeltas(abs(d_empty), n_empty, d_neutral, n_neutral)


@dataclass(frozen=True)
class FlipComposition:
    """Flip events by direction and targeting; `share_self_to_tool` is a fraction of all flips."""

    self_to_tool_well: int
    self_to_tool_ill: int
    tool_to_self_well: int
    tool_to_self_ill: int

    @property
    def flips(self) -> int:
        return (
            self.self_to_tool_well
            + self.self_to_tool_ill
            + self.tool_to_self_well
            + self.tool_to_self_ill
        )

    @property
    def share_self_to_tool(self) -> float:
        return (
            (self.self_to_tool_well + self.self_to_tool_ill) / self.flips
            if self.flips
            else float("nan")
        )


def flip_composition(
    s: np.ndarray, base: np.ndarray, conf: np.ndarray, doubt: np.ndarray
) -> FlipComposition:
    """Split the flip events of targeting() into SELF->TOOL and TOOL->SELF, well- or ill-targeted.

    A flip from base b goes to the other action, so the (nu, SELF) strata hold the SELF->TOOL flips.
    """
    counts = {"SELF": [0, 0], "TOOL": [0, 0]}
    for stratum in targeting(s, base, conf, doubt).strata:
        counts[stratum.base][0] += stratum.H
        counts[stratum.base][1] += stratum.F - stratum.H
    return FlipComposition(
        counts["SELF"][0], counts["SELF"][1], counts["TOOL"][0], counts["TOOL"][1]
    )


@dataclass(frozen=True)
class SelfAnswerTransitions:
    """Dself = P(B self-answer wrong | unaided right), Rself = P(B self-answer right | unaided wrong).

    Both condition on the retained set: A_B = SELF, s known and B's answer graded.
    """

    dself: Rate
    rself: Rate

    @property
    def n(self) -> int:
        return self.dself.denominator + self.rself.denominator


def dself_rself(s: np.ndarray, base: np.ndarray, base_correct: np.ndarray) -> SelfAnswerTransitions:
    """Dself and Rself with numerators and denominators (see SelfAnswerTransitions).

    The denominators are the unaided-right and unaided-wrong problems of the retained set, as in
    the paper's Appendix G.9 (595/6703 and 383/2760).
    """
    s, base, base_correct = np.asarray(s), np.asarray(base), np.asarray(base_correct)
    kept = (base == SELF) & (base_correct >= 0) & (s >= 0)
    right, wrong = kept & (s == 1), kept & (s == 0)
    return SelfAnswerTransitions(
        dself=Rate(int((right & (base_correct == 0)).sum()), int(right.sum())),
        rself=Rate(int((wrong & (base_correct == 1)).sum()), int(wrong.sum())),
    )


@dataclass(frozen=True)
class OracleDiagnostics:
    """rho, omega (fractions with counts) and Phi (pp) of the free perfect-oracle control."""

    rho: Rate  # direct answers among completed oracle-base actions
    omega: Rate  # unaided failures among oracle self-answers with known s
    phi: float  # oracle delegation rate - scoped delegation rate, pp, paired
    n_phi: int


def oracle_diagnostics(
    s: np.ndarray, base: np.ndarray, oracle_base: np.ndarray
) -> OracleDiagnostics:
    """rho = P(oracle_B = SELF), omega = P(s = 0 | oracle_B = SELF, s known), Phi = oracle - scoped.

    rho's denominator is the completed oracle-base actions; Phi is paired over the problems where
    both oracle_B and B completed.
    """
    s, oracle_base = np.asarray(s), np.asarray(oracle_base)
    rho = Rate(int((oracle_base == SELF).sum()), int(completed(oracle_base).sum()))
    self_known = (oracle_base == SELF) & (s >= 0)
    omega = Rate(int((self_known & (s == 0)).sum()), int(self_known.sum()))
    phi, n_phi = paired_rate_difference(oracle_base, base)
    return OracleDiagnostics(rho, omega, phi, n_phi)
