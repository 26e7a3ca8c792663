"""The paper's Tables 4-9 (4 and 5 in sampled.py), the sealed check (G.7) and the cross-experiment statements, as Grids.

Each builder takes the experiment summaries and returns a Grid (grid.py); stats/README.md,
"The tables by number", says what each column is. Intervals are the 95% problem-bootstrap
percentile intervals (estimators/intervals.py for S, WT and L; estimators/ratios.py for the rates
and differences). Rates are in %, differences in pp.

    table4   sampled decoding, per seed: unaided accuracy, S, WT, L with intervals
    table5   sampled decoding, pooled over seeds (clustered intervals), the range across seeds of
             S, WT, L and the unaided accuracy, and the repeated-label check
    table6   the delegation rate of every condition (B and every arm) with intervals, |∅ − B| and
             0 − ∅, and their medians per cohort
    table7   retained self-answer correctness: Dself and Rself per experiment, pooled totals
    table8   the voices: S, WT and L of each attribution with intervals
    table9   the oracle control: ρ, ω and Φ with intervals
    sealed   S open, S sealed and S_sealed − S with its interval (G.7)
    summaries  the paper's cross-experiment statements per cohort (estimators/claims.py)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from nudgeability.splice.experiment.conditions import (
    PAIR_HEADERS,
    SHIPPED_PAIRS,
    report_order,
)

from ...estimators.across import cohorts, nanmedian
from ...estimators.claims import claims_by_cohort
from ..cells import DAGGER, fmt
from .columns import (
    IDENT,
    ci_only,
    estimate_cell,
    estimate_record,
    ident,
    ident_record,
    labels,
    pair_cells,
    pair_columns,
    pair_record,
    with_ci,
)
from .grid import Grid
from .sampled import table4, table5


def _conditions(summaries: Sequence) -> list[str]:
    order = report_order(e.known for e in summaries)
    return [c for c in order if any(f"delegation.{c}" in e.estimates for e in summaries)]


def table6(summaries: Sequence) -> Grid:
    """The delegation rate of every condition, the controls, and medians per cohort."""
    present = _conditions(summaries)
    header = [
        "Model",
        "Task",
        "Decoding",
        "Cohort",
        *(labels(summaries).get(c, c) for c in present),
        "|∅ − B| (pp)",
        "0 − ∅ (pp)",
    ]
    rows, records = [], []
    for e in summaries:
        rows.append(
            [
                *ident(e),
                *(estimate_cell(e, f"delegation.{c}") for c in present),
                fmt(abs(e.estimates["empty_minus_B"].value))
                if "empty_minus_B" in e.estimates
                else "–",
                estimate_cell(e, "neutral_minus_empty"),
            ]
        )
        record = ident_record(e)
        for c in present:
            record |= estimate_record(e, f"delegation.{c}", c)
        record |= estimate_record(e, "empty_minus_B", "empty_minus_B")
        record |= estimate_record(e, "neutral_minus_empty", "neutral_minus_empty")
        records.append(record)
    medians = []
    for key, group in cohorts(summaries).items():

        def median(name, absolute=False, group=group):
            values = [e.estimates[name].value for e in group if name in e.estimates]
            return nanmedian([abs(v) for v in values] if absolute else values)

        cells = ["median", "", "", key, *(fmt(median(f"delegation.{c}")) for c in present)]
        cells += [fmt(median("empty_minus_B", True)), fmt(median("neutral_minus_empty"))]
        medians.append(cells)
        records.append(
            {
                "model": "median",
                "cohort": key,
                **{c: median(f"delegation.{c}") for c in present},
                "empty_minus_B": median("empty_minus_B", True),
                "neutral_minus_empty": median("neutral_minus_empty"),
            }
        )
    columns = [*IDENT]
    for c in present:
        columns += [c, f"{c}_low", f"{c}_high", f"{c}_n"]
    for name in ("empty_minus_B", "neutral_minus_empty"):
        columns += [name, f"{name}_low", f"{name}_high", f"{name}_n"]
    return Grid(
        "table6",
        "Table 6. Delegation rate (% TOOL among completed actions) of the base and every arm, with 95% intervals; the controls |∅ − B| and 0 − ∅ (pp, paired).",
        header,
        [rows, medians],
        columns,
        records,
        [
            "The medians are of the experiments of each cohort; |∅ − B| is the absolute paired difference (the CSV keeps its sign and interval)."
        ],
    )


def table7(summaries: Sequence) -> Grid:
    """Dself and Rself per experiment, and the totals pooled over each cohort."""
    rows, records, totals = [], [], []
    for e in summaries:
        t = e.self_answers
        if t is None:
            continue
        rows.append(
            [
                *ident(e),
                f"{fmt(t.dself.percent)} ({t.dself.numerator}/{t.dself.denominator})",
                ci_only(e, "dself"),
                f"{fmt(t.rself.percent)} ({t.rself.numerator}/{t.rself.denominator})",
                ci_only(e, "rself"),
            ]
        )
        records.append(
            {
                **ident_record(e),
                "dself": t.dself.percent,
                "dself_num": t.dself.numerator,
                "dself_den": t.dself.denominator,
                "rself": t.rself.percent,
                "rself_num": t.rself.numerator,
                "rself_den": t.rself.denominator,
                **estimate_record(e, "dself", "dself_ci"),
                **estimate_record(e, "rself", "rself_ci"),
            }
        )
    for key, group in cohorts([e for e in summaries if e.self_answers is not None]).items():
        d = [
            sum(getattr(e.self_answers.dself, f) for e in group)
            for f in ("numerator", "denominator")
        ]
        r = [
            sum(getattr(e.self_answers.rself, f) for e in group)
            for f in ("numerator", "denominator")
        ]
        dp = 100 * d[0] / d[1] if d[1] else math.nan
        rp = 100 * r[0] / r[1] if r[1] else math.nan
        totals.append(
            [
                "pooled",
                "",
                "",
                key,
                f"{fmt(dp)} ({d[0]}/{d[1]})",
                "",
                f"{fmt(rp)} ({r[0]}/{r[1]})",
                "",
            ]
        )
        records.append(
            {
                "model": "pooled",
                "cohort": key,
                "dself": dp,
                "dself_num": d[0],
                "dself_den": d[1],
                "rself": rp,
                "rself_num": r[0],
                "rself_den": r[1],
            }
        )
    columns = [*IDENT, "dself", "dself_num", "dself_den", "rself", "rself_num", "rself_den"]
    columns += [f"{n}_ci{s}" for n in ("dself", "rself") for s in ("", "_low", "_high", "_n")]
    return Grid(
        "table7",
        "Table 7. Retained self-answer correctness: Dself = P(B's self-answer wrong | unaided right), Rself = P(B's self-answer right | unaided wrong), on problems where B answers SELF and both answers are graded.",
        ["Model", "Task", "Decoding", "Cohort", "Dself (%)", "95% CI", "Rself (%)", "95% CI"],
        [rows, totals],
        columns,
        records,
        [
            "Pooled: numerators and denominators summed over the cohort's experiments (the paper's 595/6703 and 383/2760). These rates are not estimates of delegation value."
        ],
    )


def table8(summaries: Sequence) -> Grid:
    """S, WT and L of each voice (attribution) pair."""
    voices = [name for name in SHIPPED_PAIRS if name not in ("sealed", "oracle")]
    rows, records = [], []
    for e in summaries:
        for voice in voices:
            p = e.pairs.get(voice)
            if p is None:
                continue
            rows.append([*ident(e), PAIR_HEADERS[voice], *pair_cells(p), str(p.n_S), str(p.F)])
            records.append(
                {**ident_record(e), "voice": voice, **pair_record(p), "n_S": p.n_S, "F": p.F}
            )
    return Grid(
        "table8",
        "Table 8. The voices: the same confidence and doubt sentences attributed to the first person, the second person, a reviewer and an expert; S, WT and L with 95% intervals.",
        ["Model", "Task", "Decoding", "Cohort", "Voice", "S (pp)", "WT (%)", "L (pp)", "n_S", "F"],
        [rows],
        [*IDENT, "voice", *pair_columns(""), "n_S", "F"],
        records,
        [f"{DAGGER} L's 95% interval excludes 0."],
    )


def table9(summaries: Sequence) -> Grid:
    """The oracle control: rho, omega, Phi with intervals."""
    rows, records = [], []
    for e in summaries:
        if e.oracle is None:
            continue
        rows.append(
            [
                *ident(e),
                estimate_cell(e, "rho"),
                estimate_cell(e, "omega"),
                estimate_cell(e, "phi", dagger=True),
                estimate_cell(e, "delegation.B"),
                estimate_cell(e, "delegation.oracle_B"),
            ]
        )
        record = ident_record(e)
        for name in ("rho", "omega", "phi", "delegation.B", "delegation.oracle_B"):
            record |= estimate_record(e, name, name.replace("delegation.", "delegation_"))
        records.append(record)
    columns = [*IDENT]
    for name in ("rho", "omega", "phi", "delegation_B", "delegation_oracle_B"):
        columns += [name, f"{name}_low", f"{name}_high", f"{name}_n"]
    return Grid(
        "table9",
        "Table 9. The free perfect oracle (ask_expert): ρ = direct answers under the oracle base (%), ω = unaided failures among its self-answers (%), Φ = oracle − scoped-tool delegation (pp, paired), with 95% intervals.",
        [
            "Model",
            "Task",
            "Decoding",
            "Cohort",
            "ρ (%)",
            "ω (%)",
            "Φ (pp)",
            "B delegation (%)",
            "oracle delegation (%)",
        ],
        [rows],
        columns,
        records,
        [f"{DAGGER} Φ's 95% interval excludes 0."],
    )


def sealed(summaries: Sequence) -> Grid:
    """G.7: the swing with the thinking block sealed, against the open swing."""
    rows, records = [], []
    for e in summaries:
        p = e.pairs.get("sealed")
        if p is None:
            continue
        rows.append(
            [
                *ident(e),
                with_ci(e.S, e.S_ci),
                with_ci(p.S, p.S_ci),
                estimate_cell(e, "sealed_minus_open", dagger=True),
            ]
        )
        records.append(
            {
                **ident_record(e),
                "S": e.S,
                "S_sealed": p.S,
                "S_sealed_low": p.S_ci.low,
                "S_sealed_high": p.S_ci.high,
                **estimate_record(e, "sealed_minus_open", "delta"),
            }
        )
    return Grid(
        "sealed",
        "Sealed continuations (G.7): S with the open thinking block, S with it sealed, and their difference S_sealed − S with its 95% interval (same resampled problems).",
        [
            "Model",
            "Task",
            "Decoding",
            "Cohort",
            "S open (pp)",
            "S sealed (pp)",
            "S_sealed − S (pp)",
        ],
        [rows],
        [
            *IDENT,
            "S",
            "S_sealed",
            "S_sealed_low",
            "S_sealed_high",
            "delta",
            "delta_low",
            "delta_high",
            "delta_n",
        ],
        records,
        [
            f"{DAGGER} the difference's 95% interval excludes 0. Each S is over its own retained set I_S."
        ],
    )


def summaries_grid(summaries: Sequence) -> Grid:
    """The cross-experiment statements, one line each, per cohort."""
    rows, records = [], []
    for key, found in claims_by_cohort(summaries).items():
        for c in found:
            if not math.isnan(c.k):
                shown = f"{int(c.k)} of {c.n}"
            elif c.n:
                shown = f"median {fmt(c.value)}, range {fmt(c.low)} to {fmt(c.high)}"
            else:
                shown = "–"
            rows.append([key, c.statement, shown])
            records.append(
                {
                    "cohort": key,
                    "name": c.name,
                    "statement": c.statement,
                    "n": c.n,
                    "k": c.k,
                    "median": c.value,
                    "low": c.low,
                    "high": c.high,
                }
            )
    return Grid(
        "summaries",
        "Across experiments: the paper's statements, computed per cohort (k of N experiments where defined; medians and ranges).",
        ["Cohort", "Statement", "Value"],
        [rows],
        ["cohort", "name", "statement", "n", "k", "median", "low", "high"],
        records,
    )


GRIDS = (table4, table5, table6, table7, table8, table9, sealed, summaries_grid)
# their file stems, in order (each builder's Grid.name)
GRID_NAMES = ("table4", "table5", "table6", "table7", "table8", "table9", "sealed", "summaries")
