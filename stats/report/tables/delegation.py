"""The delegation-value table of `nudge stats`, in Markdown, CSV and LaTeX.

Markdown and LaTeX show, per experiment and (+, -) pair: the final accuracy (%) under the base and
both arms, the value swing V (pp) with its 95% interval and n_V, the helpful and harmful shares
of the flip events (%) each with its matched random reference, F, and the accuracy of every tool
that was resolved. Markdown adds a long table of the final accuracy of every condition. The CSV
is long: one estimate per line (section, experiment, name, estimate, value, interval, count), at
full precision. Markdown and LaTeX round to one decimal; '–' marks an undefined value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..cells import ci, fmt, tex_escape
from .grid import Grid, csv, latex, markdown

CSV_COLUMNS = (
    "section",
    "model",
    "task",
    "decoding",
    "name",
    "estimate",
    "value",
    "low",
    "high",
    "n",
)


def _accuracy(e, code: str) -> str:
    found = e.accuracy.get(code)
    return "–" if found is None else f"{fmt(found.accuracy)} {ci(found.ci)}"


def _tools(e) -> str:
    return (
        "; ".join(
            f"{tool} {fmt(100 * t.accuracy)} ({t.right}/{t.resolved})"
            for tool, t in e.tools.items()
        )
        or "–"
    )


def _pair_rows(summaries: Sequence):
    for e in summaries:
        for pair, v in e.swing.items():
            yield e, pair, v, e.flips[pair]


_PAIR_HEADER = (
    "Model",
    "Task",
    "Decoding",
    "Pair",
    "Acc base (%)",
    "Acc + (%)",
    "Acc − (%)",
    "V (pp) [95% CI]",
    "n_V",
    "Helpful (%) [95% CI]",
    "rand",
    "Harmful (%) [95% CI]",
    "rand",
    "F",
    "Tool accuracy (%)",
)
_TEX_HEADER = (
    "Model",
    "Task",
    "Decoding",
    "Pair",
    "Acc$_B$",
    "Acc$_+$",
    "Acc$_-$",
    "$V$ (pp)",
    "$n_V$",
    "Helpful (\\%)",
    "rand",
    "Harmful (\\%)",
    "rand",
    "$F$",
)
_NOTE = (
    "Final outcome: SELF graded as answered, TOOL graded on its resolved answer, OTHER and "
    "TRUNC wrong. V = final accuracy under doubt − under confidence on the rows with both. "
    "rand: the matched random reference (the same flips per (polarity, base action) stratum, "
    "placed at random)."
)


def _pair_cells(e, pair, v, f, accuracy) -> list[str]:
    """One (+, -) pair's cells up to F; `accuracy(e, code)` is the accuracy cell of a condition."""
    plus, minus, base = e.known.pairs[pair]
    return [
        e.model,
        e.task,
        e.decoding,
        pair,
        *(accuracy(e, code) for code in (base, plus, minus)),
        f"{fmt(v.V)} {ci(v.ci)}",
        str(v.n_V),
        f"{fmt(100 * f.helpful)} {ci(f.helpful_ci, 100)}",
        fmt(100 * f.helpful_rand),
        f"{fmt(100 * f.harmful)} {ci(f.harmful_ci, 100)}",
        fmt(100 * f.harmful_rand),
        str(f.F),
    ]


def _accuracy_only(e, code: str) -> str:
    return fmt(e.accuracy[code].accuracy) if code in e.accuracy else "–"


def pairs_grid(summaries: Sequence) -> Grid:
    """Per experiment and (+, -) pair: accuracies, V, the flip shares and F (the LaTeX table,
    whose accuracy cells carry no interval)."""
    rows = [_pair_cells(*row, _accuracy_only) for row in _pair_rows(summaries)]
    return Grid(
        "delegation_value",
        "",
        _PAIR_HEADER[:-1],
        [rows],
        CSV_COLUMNS,
        value_csv_rows(summaries),
        tex_header=_TEX_HEADER,
        tex_spec="llllrrrrrrrrrr",
        tex=tex_escape,
    )


def render_value_markdown(summaries: Sequence) -> str:
    """The Markdown delegation-value table (pairs, then every condition's final accuracy)."""
    pairs = [[*_pair_cells(*row, _accuracy), _tools(row[0])] for row in _pair_rows(summaries)]
    accuracy = [
        [e.model, e.task, e.decoding, code, f"{fmt(a.accuracy)} {ci(a.ci)}"]
        + [str(a.right), str(a.retained)]
        for e in summaries
        for code, a in e.accuracy.items()
    ]
    header = ["Model", "Task", "Decoding", "Condition", "Final accuracy (%) [95% CI]"]
    header += ["Right", "Retained"]
    grids = (
        Grid("", "", _PAIR_HEADER, [pairs], empty_row=False),
        Grid("", "", header, [accuracy], notes=[_NOTE], empty_row=False),
    )
    return "\n".join(markdown(grid) for grid in grids)


def value_csv_rows(summaries: Sequence) -> list[dict]:
    """One dict per estimate, full precision (the CSV's rows)."""
    rows = []

    def add(e, section, name, estimate, value, interval, n):
        low, high = (interval.low, interval.high) if interval is not None else (math.nan, math.nan)
        rows.append(
            {
                "section": section,
                "model": e.model,
                "task": e.task,
                "decoding": e.decoding,
                "name": name,
                "estimate": estimate,
                "value": value,
                "low": low,
                "high": high,
                "n": n,
            }
        )

    for e in summaries:
        for code, a in e.accuracy.items():
            add(e, "final_accuracy", code, "accuracy_percent", a.accuracy, a.ci, a.retained)
        for pair, v in e.swing.items():
            add(e, "value_swing", pair, "V_pp", v.V, v.ci, v.n_V)
            f = e.flips[pair]
            for estimate in ("helpful", "harmful", "helpful_rand", "harmful_rand"):
                interval = getattr(f, estimate + "_ci")
                add(e, "flip_value", pair, estimate, getattr(f, estimate), interval, f.F)
        for tool, t in e.tools.items():
            add(e, "tool_accuracy", tool, "accuracy", t.accuracy, t.ci, t.resolved)
    return rows


def render_value_csv(summaries: Sequence) -> str:
    """The long CSV: one estimate per line (fractions for shares, % for accuracy, pp for V)."""
    return csv(pairs_grid(summaries))


def render_value_latex(summaries: Sequence) -> str:
    """A booktabs LaTeX tabular of the pairs table."""
    return latex(pairs_grid(summaries))
