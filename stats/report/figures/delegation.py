"""The delegation-value figure of `nudge report` (PNG and PDF), drawn like experiments.py's.

Left: the final accuracy (%) of every condition, one bar per experiment, with 95% whiskers.
Right: per experiment, the helpful and harmful shares (%) of the primary pair's flip events with
95% whiskers, and each share's matched random reference as a red diamond.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from nudgeability.splice.experiment.conditions import PRIMARY_PAIR, report_order, short_names

from ..cells import experiment_name, save_figure, whiskers

VALUE_FIGURE = "delegation_value"


def _pair_of(summary) -> str | None:
    if PRIMARY_PAIR in summary.flips:
        return PRIMARY_PAIR
    return next(iter(summary.flips), None)


def plot_delegation_value(summaries: Sequence, out_dir: str | Path) -> list[Path]:
    """Draw the figure from DelegationValueSummary objects; return the files written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figure = Figure(figsize=(12.0, 4.8))
    left, right = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    present = [
        c
        for c in report_order(e.known for e in summaries)
        if any(c in e.accuracy for e in summaries)
    ]
    present += sorted({c for e in summaries for c in e.accuracy} - set(present))
    width = 0.8 / max(len(summaries), 1)
    x = np.arange(len(present))
    for i, e in enumerate(summaries):
        found = [e.accuracy.get(c) for c in present]
        values = [a.accuracy if a is not None else np.nan for a in found]
        yerr = whiskers(values, [a.ci if a is not None else None for a in found])
        left.bar(
            x + i * width - 0.4 + width / 2,
            values,
            width,
            yerr=yerr,
            capsize=2,
            label=experiment_name(e),
        )
    names = short_names(e.known for e in summaries)
    left.set_xticks(x, [names.get(c, c) for c in present], rotation=45, ha="right")
    left.set_ylabel("final accuracy (%)")
    left.set_ylim(0, 100)
    left.set_title("Final accuracy per condition (tool results used)")
    left.legend(fontsize=7)

    kinds = (("helpful", "helpful (wrong → right)"), ("harmful", "harmful (right → wrong)"))
    y = np.arange(len(summaries))
    height = 0.38
    for k, (kind, label) in enumerate(kinds):
        values, intervals, references = [], [], []
        for e in summaries:
            pair = _pair_of(e)
            flips = e.flips.get(pair) if pair else None
            values.append(100 * getattr(flips, kind) if flips else np.nan)
            intervals.append(getattr(flips, kind + "_ci") if flips else None)
            references.append(100 * getattr(flips, kind + "_rand") if flips else np.nan)
        offset = y + (k - 0.5) * height
        right.barh(
            offset, values, height, xerr=whiskers(values, intervals, 100), capsize=2, label=label
        )
        right.scatter(
            references,
            offset,
            marker="D",
            s=28,
            color="crimson",
            zorder=3,
            label="random reference" if k == 0 else None,
        )
    right.set_yticks(y, [experiment_name(e) for e in summaries])
    right.set_xlabel("share of flip events (%)")
    right.set_xlim(0, 100)
    right.set_title("Flip value vs the matched random reference")
    right.legend(fontsize=7)
    return save_figure(figure, out_dir, VALUE_FIGURE)


def draw_value(summaries: Sequence, out_dir: str | Path) -> list[Path]:
    """The delegation-value figure, when any experiment was resolved (none otherwise)."""
    return plot_delegation_value(summaries, out_dir) if summaries else []
