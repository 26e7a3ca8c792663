"""The cells every table and figure of the report shares, written once.

Numbers: `fmt` rounds (one decimal by default) and shows an undefined value (NaN) as "–"; `ci`
formats an interval as "[low, high]"; DAGGER marks an estimate whose 95% interval excludes 0.
Files: `csv_text` writes every CSV (NaN as an empty cell), `latex_tabular` every LaTeX table
and `tex_escape` its cells;
`save_figure` writes every figure as PNG and PDF (FORMATS), atomically; `whiskers` gives the
error bars of estimates with intervals; `experiment_name` names an experiment in a figure.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from nudgeability.util.atomic import atomic_write_files

DAGGER = "†"
FORMATS = ("png", "pdf")  # every figure is saved in each


def fmt(value: float | None, digits: int = 1) -> str:
    """`value` rounded to `digits` decimals; "–" when it is undefined (None or NaN)."""
    return "–" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def ci(interval, scale: float = 1.0, digits: int = 1) -> str:
    """ "[low, high]" of an interval, both ends times `scale` (100 turns fractions into %)."""
    return f"[{fmt(interval.low * scale, digits)}, {fmt(interval.high * scale, digits)}]"


def csv_text(rows, columns: Sequence[str]) -> str:
    """The CSV of dict `rows` under `columns`: a NaN (no estimate) is an empty cell. Every table
    of the stats package writes its CSV through here."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), restval="", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        )
    return buffer.getvalue()


def tex_escape(text) -> str:
    """`text` with LaTeX's special characters escaped, for a cell of a tabular."""
    return "".join("\\" + ch if ch in "&%$#_{}" else ch for ch in str(text))


def latex_tabular(
    spec: str, header: str, blocks: Sequence[Sequence[str]], notes: Sequence[str] = ()
) -> str:
    """A booktabs tabular: column spec `spec` ("lllr..."), the `header` row's cells joined by
    " & ", then `blocks` of body rows (each ending in "\\\\") with a \\midrule between two blocks,
    and `notes` as LaTeX comment lines after the table."""
    lines = [f"\\begin{{tabular}}{{{spec}}}", "\\toprule", header + " \\\\", "\\midrule"]
    for k, block in enumerate(blocks):
        lines += ["\\midrule"] if k else []
        lines += block
    lines += ["\\bottomrule", "\\end{tabular}", *("% " + note for note in notes)]
    return "\n".join(lines) + "\n"


def experiment_name(e) -> str:
    """How a figure names an experiment: "model / task", with the decoding unless greedy and
    the cohort when provider-served (records/cohorts.py)."""
    notes = [] if e.decoding == "greedy" else [e.decoding]
    notes += ["provider"] if getattr(e, "cohort", "open-weight") == "provider-served" else []
    return f"{e.model} / {e.task}" + (f" ({', '.join(notes)})" if notes else "")


def whiskers(values, intervals, scale: float = 1.0) -> np.ndarray:
    """(2, n) error bars (below, above) of `values` from their intervals times `scale`; none (0)
    where the value or the interval is undefined, or the interval is missing (None)."""
    lows, highs = [], []
    for value, interval in zip(values, intervals):
        if interval is None or math.isnan(value) or math.isnan(interval.low):
            lows.append(0.0)
            highs.append(0.0)
        else:
            lows.append(max(value - scale * interval.low, 0.0))
            highs.append(max(scale * interval.high - value, 0.0))
    return np.array([lows, highs])


def save_figure(figure: Figure, out_dir: Path, stem: str) -> list[Path]:
    """Render `figure` in memory and write its PNG and PDF together, atomically: a kill or a full
    disk leaves the previous files."""
    FigureCanvasAgg(figure)
    figure.tight_layout()
    files = {}
    for fmt_name in FORMATS:
        buffer = io.BytesIO()
        figure.savefig(buffer, format=fmt_name, dpi=150)
        files[out_dir / f"{stem}.{fmt_name}"] = buffer.getvalue()
    return atomic_write_files(files)
