"""The grounded-nudge table, in Markdown and CSV (its Grids: grid.py).

One table block per experiment: each signal's AUROC for s with its 95% interval (and the probe's
ECE), then the delegation accuracy of B, conf, doubt, and of each signal's grounded arm and sham
with the grounding lift. Accuracies in %, the lift in pp; a dagger marks a lift whose interval
excludes 0. `nudge stats` writes grounding.md / grounding.csv beside grounding.json
(report/document.py) when a run stored signals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ...grounding.summary import GroundingSummary
from ..cells import DAGGER, ci, fmt
from .grid import Grid, csv, markdown


def _signals(g: GroundingSummary) -> Grid:
    rows = [
        [q.signal, f"{fmt(q.auroc, 3)} {ci(q.auroc_ci, 1, 3)}", str(q.n), str(q.n_right)]
        for q in g.signals.values()
    ]
    return Grid("", "", ["Signal", "AUROC [95% CI]", "n", "n right"], [rows], empty_row=False)


def _policies(g: GroundingSummary) -> Grid:
    """B, conf and doubt (no sham, lift or share: absent cells), then each grounded arm."""
    rows = [
        [p.policy, f"{fmt(100 * p.accuracy)} {ci(p.ci, 100)}", None, None, None, str(p.n)]
        for p in g.policies.values()
    ]
    for a in g.grounded.values():
        dagger = DAGGER if a.lift_ci.excludes_zero else ""
        rows.append(
            [
                f"grounded: {a.signal}",
                f"{fmt(100 * a.accuracy)} {ci(a.accuracy_ci, 100)}",
                f"{fmt(100 * a.sham)} {ci(a.sham_ci, 100)}",
                f"{fmt(a.lift)}{dagger} {ci(a.lift_ci)}",
                fmt(100 * a.share_conf),
                str(a.n),
            ]
        )
    header = ["Policy", "Delegation accuracy (%) [95% CI]", "Sham (%) [95% CI]"]
    header += ["Lift (pp) [95% CI]", "q conf (%)", "n"]
    return Grid("", "", header, [rows], empty_row=False)


def render_markdown(summaries: Sequence[GroundingSummary]) -> str:
    """Per experiment: signal quality, then delegation accuracy per policy and the lift."""
    text = "# Grounded nudges\n\n"
    for g in summaries:
        text += (
            f"## {g.model} / {g.task} / {g.decoding}\n\n"
            f"{g.n_problems} problems, {g.n_rows} rows; {g.folds}-fold cross-fitting; "
            f"{g.samples} self-consistency samples; I_D = {g.n_retained} rows.\n\n"
        )
        text += markdown(_signals(g))
        if not math.isnan(g.probe_ece):
            text += f"\nProbe ECE: {fmt(g.probe_ece, 3)} {ci(g.probe_ece_ci, 1, 3)}\n"
        text += "\n" + markdown(_policies(g)) + "\n"
    return text + f"{DAGGER} the lift's 95% bootstrap interval excludes 0.\n"


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
    """The long CSV: one AUROC, ECE, accuracy, sham or lift per line, full precision."""
    return csv(Grid("grounding", "", _CSV_COLUMNS, [], _CSV_COLUMNS, csv_rows(summaries)))
