"""The by-position figure of `nudge report` (PNG and PDF), drawn like experiments.py's.

One row of panels per experiment whose arms were forked at extra cuts (`nudge run --cuts`): S
(pp), WT (%) and L (pp) against the cut's relative position (position/bins.py: each bin at its
centre, the paper's cut at 1, marked by a dotted line and a hollow marker), one line per pair
with its 95% whiskers; WTrand is drawn dashed beside WT. Drawn only when such a run exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from ..cells import experiment_name, save_figure, whiskers

POSITION_FIGURE = "by_position"
_PANELS = (
    ("S", "sensitivity S (pp)", 1.0),
    ("WT", "well-targeted share WT (%)", 100.0),
    ("L", "targeting lift L (pp)", 1.0),
)


def plot_by_position(positions: Sequence, out_dir: str | Path) -> list[Path]:
    """Draw the figure from PositionSummary objects; return the files written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figure = Figure(figsize=(13.0, 3.6 * len(positions)))
    for row, e in enumerate(positions):
        pairs = e.pairs
        for col, (name, ylabel, scale) in enumerate(_PANELS):
            ax = figure.add_subplot(len(positions), len(_PANELS), row * len(_PANELS) + col + 1)
            for k, pair in enumerate(pairs):
                points = [p for p in e.points if pair in p.pairs]
                # a small offset per pair keeps the whiskers of several pairs apart
                x = [p.bin.centre + 0.012 * (k - (len(pairs) - 1) / 2) for p in points]
                found = [p.pairs[pair] for p in points]
                values = [scale * getattr(f, name) for f in found]
                errors = whiskers(values, [getattr(f, f"{name}_ci") for f in found], scale)
                line = ax.errorbar(x, values, yerr=errors, marker="o", capsize=3, label=pair)
                paper = [j for j, p in enumerate(points) if p.bin.paper]
                if paper:
                    ax.plot(
                        [x[j] for j in paper],
                        [values[j] for j in paper],
                        marker="o",
                        markersize=9,
                        markerfacecolor="white",
                        color=line.lines[0].get_color(),
                        linestyle="none",
                    )
                if name == "WT":
                    ax.plot(
                        x,
                        [100 * f.WTrand for f in found],
                        linestyle="--",
                        color=line.lines[0].get_color(),
                        alpha=0.6,
                        label=f"{pair} WTrand",
                    )
            ax.axvline(1.0, color="grey", linestyle=":", linewidth=0.8)
            if name != "WT":
                ax.axhline(0.0, color="grey", linewidth=0.8)
            ax.set_xlim(-0.02, 1.06)
            ax.set_xlabel("relative position of the cut (1 = the paper's cut)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{experiment_name(e)}: {name}", fontsize=9)
            if not pairs:
                ax.text(
                    0.5,
                    0.5,
                    "no pair was forked at an extra cut",
                    ha="center",
                    va="center",
                    fontsize=8,
                    transform=ax.transAxes,
                )
            elif name != "S" and _all_undefined(e, name):
                ax.text(
                    0.5,
                    0.5,
                    f"{name} undefined at every position:\nno flip landed on a problem\n"
                    "with a competence label",
                    ha="center",
                    va="center",
                    fontsize=8,
                    transform=ax.transAxes,
                )
            elif col == 0:
                ax.legend(fontsize=7, title="pair")
            elif name == "WT":
                ax.legend(fontsize=6)
    return save_figure(figure, out_dir, POSITION_FIGURE)


def _all_undefined(e, name: str) -> bool:
    """Whether every point of every pair has `name` undefined (NaN), so its panel is empty."""
    values = [getattr(p.pairs[pair], name) for p in e.points for pair in p.pairs]
    return all(value != value for value in values)  # NaN is the one value unequal to itself


def draw_positions(positions: Sequence, out_dir: str | Path) -> list[Path]:
    """The by-position figure, when any experiment has extra cuts (none otherwise)."""
    return plot_by_position(positions, out_dir) if positions else []
