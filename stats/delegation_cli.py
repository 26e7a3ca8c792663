"""Delegation value in `nudge stats` and `nudge report` (see stats/cli.py).

`nudge stats` summarises every experiment whose run directories hold resolutions.jsonl (runs made
with `nudge run --resolve`), adds the summaries to stats.json under "delegation_value" and writes
delegation_value.md/.csv/.tex; `nudge report` draws delegation_value.png/.pdf from them. Runs
without resolutions add nothing, so the other outputs are unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from .delegation_figures import plot_delegation_value
from .delegation_records import load_value_tables
from .delegation_summary import DelegationValueSummary, summarize_value
from .delegation_tables import render_value_csv, render_value_latex, render_value_markdown
from .serialize import from_jsonable, to_jsonable

STATS_KEY = "delegation_value"
VALUE_FILES = ("delegation_value.md", "delegation_value.csv", "delegation_value.tex")


def summarize_value_run_dirs(
    run_dirs: Sequence[str | Path],
    n_boot: int = 20000,
    seed: int = 0,
    labels: Mapping[str | Path, str] | None = None,
) -> list[DelegationValueSummary]:
    """The delegation-value summary of every experiment with resolutions in `run_dirs`."""
    return [
        summarize_value(t, n_boot=n_boot, seed=seed) for t in load_value_tables(run_dirs, labels)
    ]


def value_document(values: Sequence[DelegationValueSummary]) -> dict:
    """What stats.json gains: {"delegation_value": [...]} (nothing when no run was resolved)."""
    return {STATS_KEY: to_jsonable(list(values))} if values else {}


def value_files(values: Sequence[DelegationValueSummary]) -> dict[str, str]:
    """File name -> content of the delegation-value tables (none when no run was resolved)."""
    if not values:
        return {}
    renderers = (render_value_markdown, render_value_csv, render_value_latex)
    return {name: render(values) for name, render in zip(VALUE_FILES, renderers)}


def values_from_document(document: dict) -> list[DelegationValueSummary]:
    """The delegation-value summaries stored in a stats.json document ([] when absent)."""
    return from_jsonable(list[DelegationValueSummary], document.get(STATS_KEY, []))


def draw_value(values: Sequence[DelegationValueSummary], out: str | Path) -> list[Path]:
    """The delegation-value figure, when any experiment was resolved."""
    return plot_delegation_value(values, out) if values else []
