"""Table-1-style tables of experiments, in Markdown, CSV and LaTeX.

One row per experiment: S, WT and L with their 95% intervals, WTrand, the retained counts n_S and
n_WT, the flip events F and well-targeted flips H, and the profile label; a dagger marks an L
whose interval excludes 0. Below, per decoding config: the medians of S, WT and L per task and
pooled, Spearman's rho between S and L across the experiments, and the SELF->TOOL share of all
flip events pooled over the experiments; then the profile rule with its thresholds. WT is shown
in percent.
Markdown and LaTeX round to one decimal; the CSV keeps full precision.
"""

from __future__ import annotations

from collections.abc import Sequence

from nudgeability.splice.experiment.conditions import PAIR_HEADERS, PRIMARY_PAIR, SHIPPED_PAIRS

from ...estimators.across import across_cohorts
from ..cells import DAGGER, ci, fmt, tex_escape
from .grid import Grid, TexCell, csv, latex, markdown

_CSV_COLUMNS = (
    "row",
    "model",
    "task",
    "decoding",
    "S",
    "S_low",
    "S_high",
    "WT",
    "WT_low",
    "WT_high",
    "WTrand",
    "WTrand_low",
    "WTrand_high",
    "L",
    "L_low",
    "L_high",
    "L_dagger",
    "n_S",
    "n_WT",
    "F",
    "H",
    "profile",
    "n_experiments",
    "spearman_S_L",
    "seed",
    "self_to_tool_flips",
    "pooled_flips",
    "self_to_tool_share",
)
# The pairs besides the primary one, with their column headers (splice/experiment/conditions.py owns both).
PAIR_COLUMNS = tuple((name, PAIR_HEADERS[name]) for name in SHIPPED_PAIRS if name != PRIMARY_PAIR)


def _pair_columns(summaries: Sequence) -> tuple[tuple[str, str], ...]:
    """PAIR_COLUMNS, then the pairs of a run's own interventions that some experiment holds
    (each experiment's `known`: splice/experiment/conditions.py `ConditionSet.pair_headers`)."""
    users = {
        name: header
        for e in summaries
        for name, header in e.known.pair_headers.items()
        if name not in SHIPPED_PAIRS and name in e.pairs
    }
    return PAIR_COLUMNS + tuple(users.items())


def _pooled_share(medians) -> str:
    """The pooled SELF->TOOL share of flips in percent, with its counts."""
    return f"{fmt(100 * medians.share_self_to_tool)} ({medians.self_to_tool}/{medians.flips})"


def profile_rules(summaries: Sequence) -> list[str]:
    """The profile rule(s) the labels were read with, one line each (estimators/profiles.py)."""
    rules = dict.fromkeys(e.profile_rule for e in summaries)
    return [rule.describe() for rule in rules]


def _model(e) -> str:
    """The model cell, marking an experiment whose splice was not continued token-exactly."""
    level = getattr(e, "continuation", "token")
    return e.model if level == "token" else f"{e.model} ({level}-level)"


_HEADER = (
    "Model",
    "Task",
    "Decoding",
    "S (pp) [95% CI]",
    "WT (%) [95% CI]",
    "WTrand (%)",
    "L (pp) [95% CI]",
    "n_S",
    "n_WT",
    "F",
    "H",
    "Profile",
)
# The same columns in LaTeX (math where the symbols are), for table.tex and table1.tex.
_TEX_HEADER = (
    "Model",
    "Task",
    "Decoding",
    "$S$ (pp)",
    "WT (\\%)",
    "WT$_\\mathrm{rand}$ (\\%)",
    "$L$ (pp)",
    "$n_S$",
    "$n_\\mathrm{WT}$",
    "$F$",
    "$H$",
    "Profile",
)


def _tex(cell: str) -> str:
    """Table 1's LaTeX cell: LaTeX's specials escaped, the dagger as math ('–' stays as it is)."""
    return tex_escape(cell).replace(DAGGER, "$^\\dagger$")


def _experiment_rows(summaries: Sequence) -> list[list[str]]:
    rows = []
    for e in summaries:
        dagger = DAGGER if e.primary.L_significant else ""
        rows.append(
            [
                _model(e),
                e.task,
                e.decoding,
                f"{fmt(e.S)} {ci(e.S_ci)}",
                f"{fmt(100 * e.WT)} {ci(e.WT_ci, 100)}",
                fmt(100 * e.WTrand),
                f"{fmt(e.L)}{dagger} {ci(e.L_ci)}",
                str(e.n_S),
                str(e.n_WT),
                str(e.F),
                str(e.H),
                e.profile,
            ]
        )
    return rows


def _notes(summaries: Sequence) -> list[str]:
    return [f"{DAGGER} L's 95% bootstrap interval excludes 0.", "\n".join(profile_rules(summaries))]


def _medians(summaries: Sequence) -> Grid:
    """The medians of S, WT and L per task and pooled, per decoding config, with Spearman rho
    and the pooled SELF->TOOL share; the dagger note and the profile rule under it."""
    rows = []
    for decoding, across in across_cohorts(summaries).items():
        for name, m in across.medians.items():
            rho = fmt(across.spearman_S_L, 2) if name == "pooled" else ""
            rows.append(
                [name, decoding, str(m.n), fmt(m.S), fmt(100 * m.WT), fmt(m.L), rho]
                + [_pooled_share(m)]
            )
    header = ["Median", "Cohort", "Experiments", "S (pp)", "WT (%)", "L (pp)"]
    header += ["Spearman ρ(S, L)", "SELF→TOOL (% of pooled flips)"]
    return Grid("", "", header, [rows], notes=_notes(summaries), empty_row=False)


def _seeds(summaries: Sequence) -> Grid:
    """One row per seed of each sampled experiment."""
    rows = [
        [_model(e), e.task, e.decoding, str(seed), f"{fmt(p.S)} {ci(p.S_ci)}", fmt(100 * p.WT)]
        + [f"{fmt(p.L)} {ci(p.L_ci)}", str(p.n_S), str(p.F)]
        for e in summaries
        for seed, p in e.per_seed.items()
    ]
    header = ["Model", "Task", "Decoding", "Seed", "S (pp) [95% CI]", "WT (%)"]
    header += ["L (pp) [95% CI]", "n_S", "F"]
    return Grid("", "", header, [rows], empty_row=False)


def render_markdown(summaries: Sequence, *, table1_only: bool = False) -> str:
    """The Markdown table (experiments, then medians and Spearman rho per cohort), then the
    per-seed rows and the diagnostics; `table1_only` stops after the profile rule (table1.md)."""
    parts = [Grid("", "", _HEADER, [_experiment_rows(summaries)], empty_row=False)]
    parts.append(_medians(summaries))
    if not table1_only:
        parts += [_seeds(summaries)] if any(e.per_seed for e in summaries) else []
        parts.append(diagnostics(summaries))
    return "\n".join(markdown(grid) for grid in parts)


def diagnostics(summaries: Sequence) -> Grid:
    """Controls and supporting diagnostics per experiment: S of the other pairs (voices, sealed,
    oracle), Gamma, |empty - B|, neutral - empty, the SELF->TOOL share of flips, Dself, Rself and
    the oracle's rho, omega and Phi. Rates in %, differences in pp; '–' where not run."""
    columns = _pair_columns(summaries)
    header = [
        "Model",
        "Task",
        "Decoding",
        *(name for _, name in columns),
        "Γ",
        "abs(∅−B)",
        "0−∅",
        "SELF→TOOL (%)",
        "Dself (%)",
        "Rself (%)",
        "ρ (%)",
        "ω (%)",
        "Φ",
    ]
    rows = []
    for e in summaries:
        cells = [_model(e), e.task, e.decoding]
        cells += [fmt(e.pairs[pair].S) if pair in e.pairs else "–" for pair, _ in columns]
        cells += [
            fmt(e.gamma.gamma),
            fmt(e.controls.empty_vs_base),
            fmt(e.controls.neutral_vs_empty),
            fmt(100 * e.primary.flips.share_self_to_tool),
        ]
        rates = (e.self_answers.dself, e.self_answers.rself) if e.self_answers else ()
        cells += [f"{fmt(r.percent)} ({r.numerator}/{r.denominator})" for r in rates] or ["–", "–"]
        oracle = e.oracle
        cells += (
            [fmt(oracle.rho.percent), fmt(oracle.omega.percent), fmt(oracle.phi)]
            if oracle
            else ["–"] * 3
        )
        rows.append(cells)
    return Grid("", "", header, [rows], empty_row=False)


def csv_rows(summaries: Sequence) -> list[dict]:
    """The table as dicts with full-precision numbers (the CSV's rows)."""
    rows = []
    for e in summaries:
        rows.append(
            {
                "row": "experiment",
                "model": _model(e),
                "task": e.task,
                "decoding": e.decoding,
                "S": e.S,
                "S_low": e.S_ci.low,
                "S_high": e.S_ci.high,
                "WT": e.WT,
                "WT_low": e.WT_ci.low,
                "WT_high": e.WT_ci.high,
                "WTrand": e.WTrand,
                "WTrand_low": e.WTrand_ci.low,
                "WTrand_high": e.WTrand_ci.high,
                "L": e.L,
                "L_low": e.L_ci.low,
                "L_high": e.L_ci.high,
                "L_dagger": int(e.primary.L_significant),
                "n_S": e.n_S,
                "n_WT": e.n_WT,
                "F": e.F,
                "H": e.H,
                "profile": e.profile,
            }
        )
    for e in summaries:
        for seed, p in e.per_seed.items():
            rows.append(
                {
                    "row": "seed",
                    "model": _model(e),
                    "task": e.task,
                    "decoding": e.decoding,
                    "seed": seed,
                    "S": p.S,
                    "S_low": p.S_ci.low,
                    "S_high": p.S_ci.high,
                    "WT": p.WT,
                    "WT_low": p.WT_ci.low,
                    "WT_high": p.WT_ci.high,
                    "WTrand": p.WTrand,
                    "L": p.L,
                    "L_low": p.L_ci.low,
                    "L_high": p.L_ci.high,
                    "L_dagger": int(p.L_significant),
                    "n_S": p.n_S,
                    "n_WT": p.n_WT,
                    "F": p.F,
                    "H": p.H,
                }
            )
    for decoding, across in across_cohorts(summaries).items():
        for name, m in across.medians.items():
            rows.append(
                {
                    "row": "median",
                    "model": "median",
                    "task": name,
                    "decoding": decoding,
                    "S": m.S,
                    "WT": m.WT,
                    "L": m.L,
                    "n_experiments": m.n,
                    "spearman_S_L": across.spearman_S_L if name == "pooled" else "",
                    "self_to_tool_flips": m.self_to_tool,
                    "pooled_flips": m.flips,
                    "self_to_tool_share": m.share_self_to_tool,
                }
            )
    return rows


def table1(summaries: Sequence, *, seeds: bool = False) -> Grid:
    """Table 1 as one grid: the experiments, then a row of medians per cohort (table1.tex; the
    CSV rows with the per-seed ones when `seeds`)."""
    medians = []
    for decoding, across in across_cohorts(summaries).items():
        for name, m in across.medians.items():
            rho = (
                f"; Spearman $\\rho(S, L) = {fmt(across.spearman_S_L, 2)}$"
                if name == "pooled"
                else ""
            )
            share = (
                f"; SELF$\\to$TOOL {fmt(100 * m.share_self_to_tool)}\\% of {m.flips} pooled flips"
            )
            span = TexCell(f"\\multicolumn{{5}}{{l}}{{{m.n} experiments{rho}{share}}}")
            medians.append(
                ["Median", name, decoding, fmt(m.S), fmt(100 * m.WT), None, fmt(m.L), span]
            )
    rows = csv_rows(summaries)
    return Grid(
        "table1",
        "",
        _HEADER,
        [_experiment_rows(summaries), medians],
        _CSV_COLUMNS,
        rows if seeds else [row for row in rows if row["row"] != "seed"],
        ["$^\\dagger$: the 95% bootstrap interval of L excludes 0.", *profile_rules(summaries)],
        tex_header=_TEX_HEADER,
        tex_spec="lllrrrrrrrrl",
        tex=_tex,
    )


def render_csv(summaries: Sequence, *, table1_only: bool = False) -> str:
    """The CSV table: one experiment, seed or median per row, numbers at full precision;
    `table1_only` leaves out the per-seed rows (table1.csv)."""
    return csv(table1(summaries, seeds=not table1_only))


def render_latex(summaries: Sequence) -> str:
    """A booktabs LaTeX tabular of the same table."""
    return latex(table1(summaries))
