"""S, WT, WTrand and L against a brute-force loop written from the definitions in stats/README.md, and hand-worked tables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nudgeability.stats import NONE, OTHER, SELF, TOOL, TRUNC, contributions, sensitivity, targeting
from nudgeability.stats.estimators.contributions import statistics_from_sums

COMPLETED = (SELF, TOOL, OTHER)
DECISIVE = (SELF, TOOL)


def reference(s, base, conf, doubt):
    """stats/README.md, one problem at a time in plain Python (no numpy arithmetic).

    The final formulas are the protocol's, written literally; Python's int / int and numpy's
    float64 division are both correctly rounded, so equal counts give bit-equal statistics.
    """
    s, base, conf, doubt = (list(map(int, a)) for a in (s, base, conf, doubt))
    n = len(s)
    # Sensitivity: I_S = both arms completed (OTHER counts as not-TOOL).
    kept = [i for i in range(n) if conf[i] in COMPLETED and doubt[i] in COMPLETED]
    if kept:
        mean_minus = sum(1 for i in kept if doubt[i] == TOOL) / len(kept)
        mean_plus = sum(1 for i in kept if conf[i] == TOOL) / len(kept)
        S = 100 * (mean_minus - mean_plus)
    else:
        S = math.nan
    # Targeting: strata (polarity, base action), flips counted per polarity.
    strata = []
    eligible_any = set()
    for arm in (conf, doubt):
        for b in (SELF, TOOL):
            N = F = K = H = 0
            for i in range(n):
                if s[i] == -1 or base[i] not in DECISIVE or arm[i] not in DECISIVE or base[i] != b:
                    continue
                eligible_any.add(i)
                ideal = SELF if s[i] == 1 else TOOL
                N += 1
                K += ideal != b
                if arm[i] != base[i]:
                    F += 1
                    H += arm[i] == ideal
            strata.append((N, F, K, H))
    F_total = sum(f for _, f, _, _ in strata)
    if F_total:
        WT = sum(h for _, _, _, h in strata) / F_total
        WTrand = sum(F * K / N for N, F, K, _ in strata if N) / F_total
        L = 100 * (WT - WTrand)
    else:
        WT = WTrand = L = math.nan
    return {
        "S": S,
        "n_S": len(kept),
        "WT": WT,
        "WTrand": WTrand,
        "L": L,
        "F": F_total,
        "H": sum(h for *_, h in strata),
        "n_WT": len(eligible_any),
        "strata": strata,
    }


def same(a: float, b: float) -> bool:
    """Bit-for-bit equality, NaN equal to NaN."""
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_estimators_equal_brute_force_reference_exactly_on_200_random_tables(random_tables):
    seen_nan = seen_all_codes = seen_finite = 0
    for arrays in random_tables:
        s, base, conf, doubt = arrays["s"], arrays["base"], arrays["conf"], arrays["doubt"]
        want = reference(s, base, conf, doubt)
        sens, targ = sensitivity(conf, doubt), targeting(s, base, conf, doubt)
        assert same(sens.S, want["S"]) and sens.n_S == want["n_S"]
        assert (
            same(targ.WT, want["WT"])
            and same(targ.WTrand, want["WTrand"])
            and same(targ.L, want["L"])
        )
        assert (targ.F, targ.H, targ.n_WT) == (want["F"], want["H"], want["n_WT"])
        assert [(x.N, x.F, x.K, x.H) for x in targ.strata] == want["strata"]
        # The bootstrap's path (contribution sums -> statistics) gives the same values too.
        sums = contributions(s, base, conf, doubt).sum(axis=0, keepdims=True)
        row = statistics_from_sums(sums)[0]
        assert all(same(float(v), want[k]) for v, k in zip(row, ("S", "WT", "WTrand", "L")))
        seen_nan += math.isnan(want["L"])
        seen_finite += not math.isnan(want["L"])
        seen_all_codes += all(
            set(np.unique(arrays[k])) >= {NONE, SELF, TOOL, OTHER, TRUNC}
            for k in ("base", "conf", "doubt")
        )
    # The random tables do exercise both the edge cases (no flips) and ordinary tables, and many
    # hold every action code in each of base, conf and doubt.
    assert seen_nan > 10 and seen_finite > 100 and seen_all_codes > 20


def test_hand_worked_table_a_random_level_targeting():
    #  i  s   B     +      -
    #  0  1  SELF  SELF   TOOL    - flips SELF->TOOL, a*(1)=SELF: ill-targeted
    #  1  0  SELF  SELF   TOOL    - flips SELF->TOOL, a*(0)=TOOL: well-targeted
    #  2  0  TOOL  SELF   TOOL    + flips TOOL->SELF, ill
    #  3  1  TOOL  SELF   TOOL    + flips TOOL->SELF, well
    #  4  ?  SELF  TOOL   TOOL    in I_S; s unknown: not eligible
    #  5  1  SELF  OTHER  TRUNC   not in I_S (TRUNC); OTHER and TRUNC are not eligible
    # I_S = {0..4}: A- = TOOL on 5 of 5, A+ = TOOL on 1 of 5 -> S = 100 * (5/5 - 1/5) = 80
    # strata (N, F, K, H): (+,SELF) {0,1}: (2,0,1,0); (+,TOOL) {2,3}: (2,2,1,1);
    #                      (-,SELF) {0,1}: (2,2,1,1); (-,TOOL) {2,3}: (2,0,1,0)
    # WT = 2/4 = 0.5; WTrand = (0*1/2 + 2*1/2 + 2*1/2 + 0*1/2) / 4 = 0.5; L = 0
    s = [1, 0, 0, 1, -1, 1]
    base = [SELF, SELF, TOOL, TOOL, SELF, SELF]
    conf = [SELF, SELF, SELF, SELF, TOOL, OTHER]
    doubt = [TOOL, TOOL, TOOL, TOOL, TOOL, TRUNC]
    sens, targ = (
        sensitivity(np.array(conf), np.array(doubt)),
        targeting(*map(np.array, (s, base, conf, doubt))),
    )
    assert (sens.n_S, sens.tool_minus, sens.tool_plus) == (5, 5, 1)
    assert sens.S == pytest.approx(80.0)
    assert [(x.N, x.F, x.K, x.H) for x in targ.strata] == [
        (2, 0, 1, 0),
        (2, 2, 1, 1),
        (2, 2, 1, 1),
        (2, 0, 1, 0),
    ]
    assert (targ.F, targ.H, targ.n_WT) == (4, 2, 4)
    assert targ.WT == 0.5 and targ.WTrand == 0.5 and targ.L == 0.0


def test_hand_worked_table_b_selective_doubt():
    #  i  s   B     +     -
    #  0  0  SELF  SELF  TOOL   - flip, well-targeted
    #  1  0  SELF  SELF  TOOL   - flip, well-targeted
    #  2  1  SELF  SELF  SELF
    #  3  1  SELF  SELF  SELF
    # S = 100 * (2/4 - 0/4) = 50
    # (+,SELF): N=4, F=0, K=2 (the s=0 problems), H=0; (-,SELF): N=4, F=2, K=2, H=2
    # WT = 2/2 = 1; WTrand = (0*2/4 + 2*2/4) / 2 = 0.5; L = 100 * (1 - 0.5) = 50
    s = np.array([0, 0, 1, 1])
    base = np.array([SELF] * 4)
    conf = np.array([SELF] * 4)
    doubt = np.array([TOOL, TOOL, SELF, SELF])
    assert sensitivity(conf, doubt).S == 50.0
    targ = targeting(s, base, conf, doubt)
    assert (targ.F, targ.H) == (2, 2)
    assert (targ.WT, targ.WTrand, targ.L) == (1.0, 0.5, 50.0)


def test_hand_worked_table_c_contrarian_and_misdirected():
    #  i  s   B      +     -
    #  0  1  SELF   TOOL  SELF   + flips SELF->TOOL with a*(1)=SELF: ill-targeted
    #  1  0  SELF   SELF  SELF   no flip; a flip would have been well-targeted (K)
    #  2  0  OTHER  TOOL  SELF   base OTHER: not eligible; in I_S
    #  3  0  TRUNC  none  none   B never closed: no arms, not in I_S
    #  4  ?  SELF   TOOL  TOOL   in I_S; s unknown
    # I_S = {0,1,2,4}: A- = TOOL on {4} -> 1/4; A+ = TOOL on {0,2,4} -> 3/4; S = 100*(1/4-3/4) = -50
    # (+,SELF) {0,1}: N=2, F=1, K=1, H=0; (-,SELF) {0,1}: N=2, F=0, K=1, H=0; TOOL strata empty
    # WT = 0/1 = 0; WTrand = (1*1/2) / 1 = 0.5; L = 100 * (0 - 0.5) = -50
    s = np.array([1, 0, 0, 0, -1])
    base = np.array([SELF, SELF, OTHER, TRUNC, SELF])
    conf = np.array([TOOL, SELF, TOOL, NONE, TOOL])
    doubt = np.array([SELF, SELF, SELF, NONE, TOOL])
    sens = sensitivity(conf, doubt)
    assert (sens.n_S, sens.S) == (4, -50.0)
    targ = targeting(s, base, conf, doubt)
    assert [(x.N, x.F, x.K, x.H) for x in targ.strata] == [
        (2, 1, 1, 0),
        (0, 0, 0, 0),
        (2, 0, 1, 0),
        (0, 0, 0, 0),
    ]
    assert (targ.WT, targ.WTrand, targ.L, targ.n_WT) == (0.0, 0.5, -50.0, 2)


def test_no_retained_problem_or_no_flip_gives_nan_not_an_error():
    empty = np.array([], dtype=np.int8)
    assert math.isnan(sensitivity(empty, empty).S)
    targ = targeting(
        np.array([1, 0]), np.array([SELF, TOOL]), np.array([SELF, TOOL]), np.array([SELF, TOOL])
    )
    assert targ.F == 0 and math.isnan(targ.WT) and math.isnan(targ.WTrand) and math.isnan(targ.L)


def test_arrays_of_different_lengths_are_rejected_with_a_value_error():
    with pytest.raises(ValueError, match="shape"):
        sensitivity(np.array([SELF, TOOL]), np.array([SELF]))
    with pytest.raises(ValueError, match="shape"):
        targeting(
            np.array([1]), np.array([SELF, TOOL]), np.array([SELF, TOOL]), np.array([SELF, TOOL])
        )
