"""Figures of `nudge report`, drawn with matplotlib's Agg canvas and saved as PNG and PDF.

- s_vs_l: S against L per experiment, each interval as a whisker (the paper's Figure 2; the
  whiskers are the two marginal 95% intervals, not a joint region), one panel per cohort and
  decoding;
- flip_composition: flip events split into SELF->TOOL and TOOL->SELF, well- or ill-targeted
  (the paper's Figure 5), each bar named with its cohort;
- delegation: the delegation rate (TOOL among completed actions) of every condition present;
- oracle: rho, omega and Phi of the free perfect-oracle control.

Figures are built on matplotlib.figure.Figure directly (never pyplot), so drawing them neither
needs a display nor changes the caller's matplotlib backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from nudgeability.splice.experiment.conditions import report_order, short_names
from nudgeability.util.atomic import remove_temporaries

from ...estimators.across import cohorts
from ..cells import experiment_name, save_figure, whiskers

_TASK_MARKERS = ("o", "s", "^", "D", "v")


def plot_s_vs_l(summaries: Sequence, out_dir: Path) -> list[Path]:
    """Figure 2: S (x, pp) against L (y, pp), one point per experiment with both 95% whiskers,
    one panel per cohort and decoding (open-weight / provider-served; estimators/across.py)."""
    groups = cohorts(summaries)
    figure = Figure(figsize=(6.4 * len(groups), 4.8))
    for k, (key, members) in enumerate(groups.items()):
        ax = figure.add_subplot(1, len(groups), k + 1)
        _s_vs_l_panel(ax, members)
        ax.set_title(f"{key}: S vs L (95% bootstrap whiskers)", fontsize=10)
    return save_figure(figure, out_dir, "s_vs_l")


def _s_vs_l_panel(ax, summaries: Sequence) -> None:
    tasks = list(dict.fromkeys(e.task for e in summaries))
    for t, task in enumerate(tasks):
        group = [e for e in summaries if e.task == task]
        xerr = whiskers([e.S for e in group], [e.S_ci for e in group])
        yerr = whiskers([e.L for e in group], [e.L_ci for e in group])
        ax.errorbar(
            [e.S for e in group],
            [e.L for e in group],
            xerr=xerr,
            yerr=yerr,
            fmt=_TASK_MARKERS[t % len(_TASK_MARKERS)],
            capsize=3,
            label=task,
        )
        for e in group:
            if not (math.isnan(e.S) or math.isnan(e.L)):
                ax.annotate(
                    e.model, (e.S, e.L), fontsize=7, xytext=(3, 3), textcoords="offset points"
                )
    if not any(not (math.isnan(e.S) or math.isnan(e.L)) for e in summaries):
        ax.text(
            0.5,
            0.5,
            "No experiment has both S and L defined, so there is nothing to plot.\n"
            "L needs flip events on problems with a competence label (a graded NT\n"
            "answer); S needs problems with both the + and − arms completed.",
            ha="center",
            va="center",
            fontsize=8,
            transform=ax.transAxes,
        )
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.axvline(0.0, color="grey", linewidth=0.8)
    ax.set_xlabel("sensitivity S (pp)")
    ax.set_ylabel("targeting lift L (pp)")
    ax.legend(title="task")


def plot_flip_composition(summaries: Sequence, out_dir: Path) -> list[Path]:
    """Stacked bars: each experiment's flip events by direction and targeting, as shares."""
    figure = Figure(figsize=(7.0, 0.5 * len(summaries) + 2.4))
    ax = figure.add_subplot()
    parts = (
        ("self_to_tool_well", "SELF→TOOL, well-targeted"),
        ("self_to_tool_ill", "SELF→TOOL, ill-targeted"),
        ("tool_to_self_well", "TOOL→SELF, well-targeted"),
        ("tool_to_self_ill", "TOOL→SELF, ill-targeted"),
    )
    left = np.zeros(len(summaries))
    for attribute, label in parts:
        shares = np.array(
            [
                100.0 * getattr(e.primary.flips, attribute) / e.primary.flips.flips
                if e.primary.flips.flips
                else 0.0
                for e in summaries
            ]
        )
        ax.barh([experiment_name(e) for e in summaries], shares, left=left, label=label)
        left += shares
    ax.set_xlabel("share of flip events (%)")
    ax.set_xlim(0, 100)
    ax.set_title("Flip composition (+ and − arms)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    return save_figure(figure, out_dir, "flip_composition")


def plot_delegation(summaries: Sequence, out_dir: Path) -> list[Path]:
    """Grouped bars: delegation rate (%) per condition, one group per condition, one bar per experiment."""
    order = report_order(e.known for e in summaries)
    present = [c for c in order if any(c in e.delegation for e in summaries)]
    figure = Figure(
        figsize=(
            min(16.0, max(6.4, 2.0 + 0.35 * len(present) * max(1, len(summaries)) ** 0.5)),
            4.8,
        )
    )
    ax = figure.add_subplot()
    width = 0.8 / max(len(summaries), 1)
    x = np.arange(len(present))
    for i, e in enumerate(summaries):
        rates = [e.delegation[c].percent if c in e.delegation else np.nan for c in present]
        ax.bar(x + i * width - 0.4 + width / 2, rates, width, label=experiment_name(e))
    names = short_names(e.known for e in summaries)
    ax.set_xticks(x, [names.get(c, c) for c in present], rotation=45, ha="right")
    ax.set_ylabel("delegation rate (% TOOL)")
    ax.set_title("Delegation rate per condition")
    ax.legend(fontsize=7)
    return save_figure(figure, out_dir, "delegation")


def plot_oracle(summaries: Sequence, out_dir: Path) -> list[Path]:
    """Three panels over the experiments with an oracle control: rho (%), omega (%), Phi (pp)."""
    group = [e for e in summaries if e.oracle is not None]
    figure = Figure(figsize=(10.0, 0.5 * max(len(group), 1) + 2.0))
    panels = (
        ("ρ: direct answers under the oracle (%)", lambda o: o.rho.percent),
        ("ω: self-answers on unaided failures (%)", lambda o: o.omega.percent),
        ("Φ: oracle − scoped delegation (pp)", lambda o: o.phi),
    )
    for k, (title, value) in enumerate(panels):
        ax = figure.add_subplot(1, 3, k + 1)
        if group:
            ax.barh([experiment_name(e) for e in group], [value(e.oracle) for e in group])
        else:
            ax.text(0.5, 0.5, "no oracle runs", ha="center", va="center", transform=ax.transAxes)
        if k:
            ax.set_yticks([])
        ax.set_title(title, fontsize=9)
    return save_figure(figure, out_dir, "oracle")


def draw_all(summaries: Sequence, out_dir: str | Path) -> list[Path]:
    """Draw every figure into out_dir (created if needed); return the files written."""
    if not summaries:
        raise ValueError("no experiment to draw")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_temporaries(out_dir, only_abandoned=True)  # left by a killed report
    paths = []
    for plot in (plot_s_vs_l, plot_flip_composition, plot_delegation, plot_oracle):
        paths += plot(summaries, out_dir)
    return paths
