"""The paper's cross-experiment statements, computed: counts (k of N), medians and ranges.

stats/README.md, "Across experiments: the paper's statements". Each is computed within one
cohort (across.cohorts: open-weight or provider-served, per decoding config) over the
experiments where it is defined, and N says how many those were:

    gamma_positive        Gamma > 0                                  (paper: 17 of 18)
    gamma_median          median Gamma, pp                           (+5.6 pp)
    empty_vs_base         median and largest |empty - B|, pp         (0.3 / 3.6 pp)
    neutral_vs_empty      median neutral - empty, pp                 (-0.9 pp)
    neutral_shift         |neutral - empty| >= 3 pp                  (4 of 18)
    first_at_least_expert S_first >= S_expert - tie                  (16 of 18)
    self_to_tool_majority SELF->TOOL > half of the flip events       (17 of 18)
    S_positive            S > 0                                      (18 of 18)
    sealed_positive       S_sealed > 0                               (18 of 18)
    sealed_minus_open     range of S_sealed - S, pp                  (-20.8 to +53.7 pp)
    L_positive.<task>     L > 0 in the task's experiments            (every StrategyQA one)
    L_negative.<task>     L < 0                                      (5 of 9 MuSiQue)
    rho_range.<task>      range of the oracle's direct-answer rate   (19-96% over both tasks)
    accuracy.<task>       range and median of the unaided accuracy   (51.2-82.8%, median 63.1%)

The tie rule of the voice comparison: the paper counts GLM-Z1-9B on MuSiQue (3.5 vs 3.7 pp) as
tied and Qwen3-32B on StrategyQA (39.2 vs 38.3 pp) as expert-higher, so a difference below
TIE_PP = 0.5 pp is a tie (a tie counts as "at least as strong").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .across import cohorts, nanmedian
from .seeds import value_range

TIE_PP = 0.5  # pp: a first-person vs expert difference below this is a tie


@dataclass(frozen=True)
class Claim:
    """One statement: `k` of `n` experiments (counts), or a `value` with its range (low, high)
    over n experiments (medians and ranges); fields that do not apply are NaN."""

    name: str
    statement: str
    n: int
    k: float = math.nan
    value: float = math.nan
    low: float = math.nan
    high: float = math.nan


def _defined(values) -> list[float]:
    return [v for v in values if v is not None and not math.isnan(v)]


def _count(name: str, statement: str, values, test) -> Claim:
    defined = _defined(values)
    return Claim(name, statement, len(defined), k=sum(1 for v in defined if test(v)))


def _spread(name: str, statement: str, values) -> Claim:
    defined = _defined(values)
    low, high = value_range(defined)
    return Claim(name, statement, len(defined), value=nanmedian(defined), low=low, high=high)


def _estimate(e, name: str) -> float:
    found = getattr(e, "estimates", {}).get(name)
    return math.nan if found is None else found.value


def _first_vs_expert(e) -> float:
    """1 when first person >= expert (with the tie rule), 0 when expert is higher, NaN unrun."""
    if "first" not in e.pairs or "expert" not in e.pairs:
        return math.nan
    first, expert = e.pairs["first"].S, e.pairs["expert"].S
    if math.isnan(first) or math.isnan(expert):
        return math.nan
    return 1.0 if first >= expert - TIE_PP else 0.0


def claims(experiments: Sequence) -> list[Claim]:
    """The statements of the module docstring over one group of experiments."""
    found = [
        _count("gamma_positive", "Γ > 0", [e.gamma.gamma for e in experiments], lambda v: v > 0),
        _spread("gamma_median", "median Γ (pp)", [e.gamma.gamma for e in experiments]),
        _spread(
            "empty_vs_base",
            "|∅ − B| (pp): median, range",
            [abs(_estimate(e, "empty_minus_B")) for e in experiments],
        ),
        _spread(
            "neutral_vs_empty",
            "0 − ∅ (pp): median, range",
            [_estimate(e, "neutral_minus_empty") for e in experiments],
        ),
        _count(
            "neutral_shift",
            "|0 − ∅| ≥ 3 pp",
            [_estimate(e, "neutral_minus_empty") for e in experiments],
            lambda v: abs(v) >= 3.0,
        ),
        _count(
            "first_at_least_expert",
            f"S first person ≥ S expert (tie: within {TIE_PP:g} pp)",
            [_first_vs_expert(e) for e in experiments],
            lambda v: v == 1.0,
        ),
        _count(
            "self_to_tool_majority",
            "SELF→TOOL > 50% of flip events",
            [e.primary.flips.share_self_to_tool for e in experiments],
            lambda v: v > 0.5,
        ),
        _count("S_positive", "S > 0", [e.S for e in experiments], lambda v: v > 0),
        _count(
            "sealed_positive",
            "S sealed > 0",
            [e.pairs["sealed"].S if "sealed" in e.pairs else math.nan for e in experiments],
            lambda v: v > 0,
        ),
        _spread(
            "sealed_minus_open",
            "S sealed − S (pp): median, range",
            [_estimate(e, "sealed_minus_open") for e in experiments],
        ),
        _spread(
            "rho_range",
            "oracle direct answers ρ (%), every task: median, range",
            [e.oracle.rho.percent if e.oracle else math.nan for e in experiments],
        ),
    ]
    for task in dict.fromkeys(e.task for e in experiments):
        group = [e for e in experiments if e.task == task]
        found += [
            _count(f"L_positive.{task}", f"L > 0 ({task})", [e.L for e in group], lambda v: v > 0),
            _count(f"L_negative.{task}", f"L < 0 ({task})", [e.L for e in group], lambda v: v < 0),
            _spread(
                f"rho_range.{task}",
                f"oracle direct answers ρ (%), {task}: median, range",
                [e.oracle.rho.percent if e.oracle else math.nan for e in group],
            ),
            _spread(
                f"accuracy.{task}",
                f"unaided accuracy (%), {task}: median, range",
                [e.unaided_accuracy.percent for e in group],
            ),
        ]
    return found


def claims_by_cohort(summaries: Sequence) -> dict[str, list[Claim]]:
    """`claims` of each cohort (across.cohorts), in its order."""
    return {key: claims(group) for key, group in cohorts(summaries).items()}
