"""The grounded-nudge table (Markdown, CSV) and figures (delegation accuracy, ROC curves).

One table block per experiment: each signal's AUROC for s with its 95% interval (and the probe's
ECE), then the delegation accuracy of B, conf, doubt, and of each signal's grounded arm and sham
with the grounding lift. Accuracies in %, the lift in pp; a dagger marks a lift whose interval
excludes 0. `nudge stats` writes grounding.json / grounding.md / grounding.csv beside stats.json
when a run stored signals; `nudge report` draws grounding_accuracy and grounding_roc from them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from nudgeability.models.atomic import atomic_write_files

from .figures import save_figure
from .grounding_summary import GroundingSummary
from .report_tables import csv_text
from .serialize import from_jsonable, to_jsonable

GROUNDING_FILE = "grounding.json"
DAGGER = "†"
FORMATS = ("png", "pdf")


def _fmt(value: float, digits: int = 1) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _ci(interval, scale: float = 1.0, digits: int = 1) -> str:
    return f"[{_fmt(interval.low * scale, digits)}, {_fmt(interval.high * scale, digits)}]"


def render_markdown(summaries: Sequence[GroundingSummary]) -> str:
    """Per experiment: signal quality, then delegation accuracy per policy and the lift."""
    lines = ["# Grounded nudges", ""]
    for g in summaries:
        lines += [
            f"## {g.model} / {g.task} / {g.decoding}",
            "",
            f"{g.n_problems} problems, {g.n_rows} rows; {g.folds}-fold cross-fitting; "
            f"{g.samples} self-consistency samples; I_D = {g.n_retained} rows.",
            "",
            "| Signal | AUROC [95% CI] | n | n right |",
            "|---|---|---|---|",
        ]
        for q in g.signals.values():
            lines.append(
                f"| {q.signal} | {_fmt(q.auroc, 3)} {_ci(q.auroc_ci, 1, 3)} | {q.n} | {q.n_right} |"
            )
        if not math.isnan(g.probe_ece):
            lines += ["", f"Probe ECE: {_fmt(g.probe_ece, 3)} {_ci(g.probe_ece_ci, 1, 3)}"]
        lines += [
            "",
            "| Policy | Delegation accuracy (%) [95% CI] | Sham (%) [95% CI] | Lift (pp) [95% CI] | q conf (%) | n |",
            "|---|---|---|---|---|---|",
        ]
        for p in g.policies.values():
            lines.append(
                f"| {p.policy} | {_fmt(100 * p.accuracy)} {_ci(p.ci, 100)} | | | | {p.n} |"
            )
        for a in g.grounded.values():
            dagger = DAGGER if a.lift_ci.excludes_zero else ""
            lines.append(
                f"| grounded: {a.signal} | {_fmt(100 * a.accuracy)} {_ci(a.accuracy_ci, 100)} "
                f"| {_fmt(100 * a.sham)} {_ci(a.sham_ci, 100)} | {_fmt(a.lift)}{dagger} {_ci(a.lift_ci)} "
                f"| {_fmt(100 * a.share_conf)} | {a.n} |"
            )
        lines.append("")
    lines.append(f"{DAGGER} the lift's 95% bootstrap interval excludes 0.")
    return "\n".join(lines) + "\n"


_CSV_COLUMNS = ("model", "task", "decoding", "row", "name", "value", "low", "high", "n", "extra")


def csv_rows(summaries: Sequence[GroundingSummary]) -> list[dict]:
    """Long-format rows: one per AUROC, ECE, policy accuracy, sham and lift (full precision)."""
    rows = []
    for g in summaries:
        base = {"model": g.model, "task": g.task, "decoding": g.decoding}
        for q in g.signals.values():
            rows.append(base | _row("auroc", q.signal, q.auroc, q.auroc_ci, q.n))
        if not math.isnan(g.probe_ece):
            rows.append(base | _row("ece", "probe", g.probe_ece, g.probe_ece_ci, g.n_retained))
        for p in g.policies.values():
            rows.append(base | _row("accuracy", p.policy, p.accuracy, p.ci, p.n))
        for a in g.grounded.values():
            rows.append(
                base | _row("accuracy", f"grounded:{a.signal}", a.accuracy, a.accuracy_ci, a.n)
            )
            rows.append(
                base
                | _row("sham", f"sham:{a.signal}", a.sham, a.sham_ci, a.n)
                | {"extra": a.share_conf}
            )
            rows.append(base | _row("lift_pp", a.signal, a.lift, a.lift_ci, a.n))
    return rows


def _row(kind: str, name: str, value: float, interval, n: int) -> dict:
    return {
        "row": kind,
        "name": name,
        "value": value,
        "low": interval.low,
        "high": interval.high,
        "n": n,
    }


def render_csv(summaries: Sequence[GroundingSummary]) -> str:
    return csv_text(csv_rows(summaries), _CSV_COLUMNS)


def write_grounding(summaries: Sequence[GroundingSummary], out: str | Path) -> list[Path]:
    """grounding.json, grounding.md and grounding.csv in `out`; nothing when no summary."""
    if not summaries:
        return []
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    contents = {
        GROUNDING_FILE: json.dumps(to_jsonable(list(summaries)), indent=1, ensure_ascii=False)
        + "\n",
        "grounding.md": render_markdown(summaries),
        "grounding.csv": render_csv(summaries),
    }
    # together and atomically, as stats.json and its tables
    return atomic_write_files({out / name: text.encode("utf-8") for name, text in contents.items()})


def read_grounding(directory: str | Path) -> list[GroundingSummary]:
    """The summaries of a grounding.json in `directory` (empty when there is none)."""
    file = Path(directory) / GROUNDING_FILE
    if not file.is_file():
        return []
    return from_jsonable(list[GroundingSummary], json.loads(file.read_text(encoding="utf-8")))


# ---------------------------------------------------------------- figures


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
        err = np.array(
            [
                [max(vi - 100 * i.low, 0), max(100 * i.high - vi, 0)]
                if not math.isnan(i.low)
                else [0, 0]
                for vi, i in zip(v, intervals)
            ]
        ).T
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
            ax.plot(q.fpr, q.tpr, drawstyle="steps-post", label=f"{q.signal} ({_fmt(q.auroc, 2)})")
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
