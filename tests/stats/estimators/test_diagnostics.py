"""Gamma, controls, flip composition, Dself/Rself and the oracle diagnostics on a hand-worked table."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nudgeability.stats import (
    NONE,
    OTHER,
    SELF,
    TOOL,
    TRUNC,
    control_deltas,
    delegation_rate,
    dself_rself,
    flip_composition,
    gamma,
    oracle_diagnostics,
)

#  i  s   B     +      -      B correct  oracle_B  empty  neutral
#  0  1  SELF  SELF   TOOL    0 (wrong)   SELF      SELF   TOOL
#  1  0  SELF  SELF   TOOL    1 (right)   TOOL      SELF   TOOL
#  2  0  TOOL  SELF   TOOL    -           SELF      TOOL   TOOL
#  3  1  TOOL  SELF   TOOL    -           TOOL      TOOL   OTHER
#  4  ?  SELF  TOOL   TOOL    1           TOOL      TOOL   none
#  5  1  SELF  OTHER  TRUNC   1 (right)   TRUNC     TRUNC  SELF
S = np.array([1, 0, 0, 1, -1, 1])
BASE = np.array([SELF, SELF, TOOL, TOOL, SELF, SELF])
CONF = np.array([SELF, SELF, SELF, SELF, TOOL, OTHER])
DOUBT = np.array([TOOL, TOOL, TOOL, TOOL, TOOL, TRUNC])
BASE_CORRECT = np.array([0, 1, -1, -1, 1, 1])
ORACLE = np.array([SELF, TOOL, SELF, TOOL, TOOL, TRUNC])
EMPTY = np.array([SELF, SELF, TOOL, TOOL, TOOL, TRUNC])
NEUTRAL = np.array([TOOL, TOOL, TOOL, OTHER, NONE, SELF])


def test_gamma_is_tool_rate_on_unaided_failures_minus_successes():
    # known s, completed B: s=0 -> {1, 2}, TOOL on {2}: 1/2; s=1 -> {0, 3, 5}, TOOL on {3}: 1/3
    # Gamma = 100 * (1/2 - 1/3) = 16.67 pp
    g = gamma(S, BASE)
    assert (g.tool_if_wrong.numerator, g.tool_if_wrong.denominator) == (1, 2)
    assert (g.tool_if_right.numerator, g.tool_if_right.denominator) == (1, 3)
    assert g.gamma == pytest.approx(100 * (1 / 2 - 1 / 3))


def test_delegation_rate_and_controls_are_paired_over_completed_arms():
    # B: TOOL on {2, 3} of 6 completed
    assert (delegation_rate(BASE).numerator, delegation_rate(BASE).denominator) == (2, 6)
    # |empty - B| over {0..4} (empty TRUNC on 5): empty TOOL {2,3,4} = 3/5, B TOOL {2,3} = 2/5 -> 20 pp
    # neutral - empty over {0,1,2,3} (neutral none on 4, empty TRUNC on 5):
    #   neutral TOOL {0,1,2} = 3/4, empty TOOL {2,3} = 2/4 -> 25 pp (OTHER counts as not-TOOL)
    c = control_deltas(BASE, EMPTY, NEUTRAL)
    assert (c.n_empty_vs_base, c.n_neutral_vs_empty) == (5, 4)
    assert c.empty_vs_base == pytest.approx(20.0) and c.neutral_vs_empty == pytest.approx(25.0)
    missing = control_deltas(BASE, None, None)
    assert math.isnan(missing.empty_vs_base) and missing.n_neutral_vs_empty == 0


def test_flip_composition_splits_flips_by_direction_and_targeting():
    # SELF->TOOL: problem 0 under - (s=1: ill), problem 1 under - (s=0: well)
    # TOOL->SELF: problem 2 under + (s=0: ill), problem 3 under + (s=1: well)
    f = flip_composition(S, BASE, CONF, DOUBT)
    assert (f.self_to_tool_well, f.self_to_tool_ill, f.tool_to_self_well, f.tool_to_self_ill) == (
        1,
        1,
        1,
        1,
    )
    assert f.flips == 4 and f.share_self_to_tool == 0.5


def test_dself_rself_condition_on_unaided_outcome_among_graded_self_answers():
    # retained: B = SELF, B graded, s known -> {0, 1, 5} (4 has s unknown; 2, 3 are TOOL)
    # Dself = unaided right but wrong with the tool: s=1 -> {0, 5}, wrong on {0}: 1/2
    # Rself = unaided wrong but right with the tool: s=0 -> {1}, right on {1}: 1/1
    t = dself_rself(S, BASE, BASE_CORRECT)
    assert (t.dself.numerator, t.dself.denominator) == (1, 2)
    assert (t.rself.numerator, t.rself.denominator) == (1, 1)
    assert t.n == 3 and t.dself.percent == 50.0


def test_oracle_rho_omega_phi():
    # rho: SELF among completed oracle actions {0..4}: {0, 2} -> 2/5
    # omega: oracle SELF with known s: {0, 2}; unaided failures among them: {2} -> 1/2
    # Phi over {0..4}: oracle TOOL {1,3,4} = 3/5, B TOOL {2,3} = 2/5 -> +20 pp
    o = oracle_diagnostics(S, BASE, ORACLE)
    assert (o.rho.numerator, o.rho.denominator) == (2, 5)
    assert (o.omega.numerator, o.omega.denominator) == (1, 2)
    assert o.n_phi == 5 and o.phi == pytest.approx(20.0)
