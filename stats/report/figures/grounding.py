"""The grounded-nudge figures of `nudge report`: delegation accuracy per policy, ROC curves.

Drawn from the GroundingSummary objects of grounding.json, like the other figures on matplotlib's
Figure directly, and saved as PNG and PDF (cells.save_figure).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ...grounding.summary import GroundingSummary
from ..cells import fmt, save_figure, whiskers


def plot_accuracy(summaries: Sequence[GroundingSummary], out_dir: Path) -> list[Path]:
    """Delegation accuracy (%) per policy with 95% whiskers, one panel per experiment; each
    grounded arm is drawn beside its sham."""
    figure = Figure(figsize=(7.0, 3.2 * len(summaries) + 0.6))
    for k, g in enumerate(summaries):
        ax = figure.add_subplot(len(summaries), 1, k + 1)
        names, values, intervals = [], [], []
        for p in g.policies.values():
            names.append(p.policy), values.append(p.accuracy), intervals.append(p.ci)
        for a in g.grounded.values():
            names += [f"grounded\n{a.signal}", f"sham\n{a.signal}"]
            values += [a.accuracy, a.sham]
            intervals += [a.accuracy_ci, a.sham_ci]
        v = 100 * np.array(values, dtype=float)
        err = whiskers(v, intervals, 100)
        colours = ["grey"] * len(g.policies) + ["tab:blue", "tab:orange"] * len(g.grounded)
        ax.bar(range(len(v)), v, yerr=err, capsize=3, color=colours)
        ax.set_xticks(range(len(v)), names, fontsize=7)
        ax.set_ylabel("delegation accuracy (%)")
        ax.set_ylim(0, 100)
        ax.set_title(f"{g.model} / {g.task} / {g.decoding} (n = {g.n_retained})", fontsize=9)
    return save_figure(figure, out_dir, "grounding_accuracy")


def plot_roc(summaries: Sequence[GroundingSummary], out_dir: Path) -> list[Path]:
    """ROC curves of every signal for s, one panel per experiment, AUROC in the legend."""
    figure = Figure(figsize=(4.6 * len(summaries), 4.4))
    for k, g in enumerate(summaries):
        ax = figure.add_subplot(1, len(summaries), k + 1)
        for q in g.signals.values():
            ax.plot(q.fpr, q.tpr, drawstyle="steps-post", label=f"{q.signal} ({fmt(q.auroc, 2)})")
        ax.plot([0, 1], [0, 1], color="grey", linewidth=0.8, linestyle="--")
        ax.set_xlabel("false-positive rate (wrong called right)")
        ax.set_ylabel("true-positive rate (right called right)")
        ax.set_title(f"{g.model} / {g.task} / {g.decoding}", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    return save_figure(figure, out_dir, "grounding_roc")


def draw_grounding(summaries: Sequence[GroundingSummary], out_dir: str | Path) -> list[Path]:
    """Both grounding figures (none when there is no summary)."""
    if not summaries:
        return []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return plot_accuracy(summaries, out_dir) + plot_roc(summaries, out_dir)
