"""One table as a grid of display cells plus full-precision CSV rows, rendered three ways.

Every table of `nudge stats` is built as a `Grid`: the paper's numbered ones (paper.py,
sampled.py), Table 1 and its diagnostics (experiments.py), the delegation value (delegation.py)
and the grounded nudges (grounding.py). A grid holds a caption, the header, body blocks of display
cells (rounded, '–' for undefined, intervals in brackets), the same rows as dicts of
full-precision numbers for the CSV, and notes printed under the table. `markdown`, `csv` and
`latex` turn it into the three files, so no table writes its own formatting; a file made of
several tables (table.md) is their Markdown one after another.

A cell that is None is absent rather than empty: it takes no padding ("| |", "& &"), as in
the rows where Table 1 and the grounding tables leave a column out. A `TexCell` is LaTeX already
(a \\multicolumn) and is written as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..cells import csv_text, latex_tabular, tex_escape


class TexCell(str):
    """A cell written in LaTeX already (a \\multicolumn): `latex` passes it through."""


@dataclass(frozen=True)
class Grid:
    """A table: `blocks` of display rows (a rule between blocks), `records` for the CSV.

    The LaTeX reads the same cells unless the table says otherwise: `tex_header` (the header's
    cells as LaTeX, where $S$ reads better than "S"), `tex_spec` (the column spec, where it is
    not the text columns first), `tex` (how a cell is escaped: `tex_cell` turns the symbols into
    math; Table 1 and the delegation table escape only LaTeX's specials)."""

    name: str  # the file stem: table6 -> table6.md, table6.csv, table6.tex
    caption: str  # "" for none (the tables that make up table.md)
    header: Sequence[str]
    blocks: Sequence[Sequence[Sequence[str | None]]]
    csv_columns: Sequence[str] = ()
    records: Sequence[dict] = field(default_factory=list)
    notes: Sequence[str] = ()
    empty_row: bool = True  # a row of '–' when the table has no row (the numbered tables)
    tex_header: Sequence[str] | None = None
    tex_spec: str | None = None
    tex: Callable[[str], str] | None = None  # None: tex_cell

    @property
    def rows(self) -> list[Sequence[str | None]]:
        return [row for block in self.blocks for row in block]


def markdown(grid: Grid) -> str:
    """`**caption**`, the pipe table (blocks one after another), then the notes as paragraphs."""
    lines = [f"**{grid.caption}**", ""] if grid.caption else []
    lines += [_md_row(grid.header), "|" + "---|" * len(grid.header)]
    if not grid.rows and grid.empty_row:
        lines.append(_md_row(["–"] * len(grid.header)))
    lines += [_md_row(row) for row in grid.rows]
    for note in grid.notes:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def _md_row(cells: Sequence[str | None]) -> str:
    """A pipe-table row; a '|' inside a cell (|∅ − B|) is escaped so it does not split it."""
    return "|" + "".join(" |" if c is None else f" {_md_escape(c)} |" for c in cells)


def _md_escape(cell) -> str:
    return str(cell).replace("|", "\\|")


# Symbols of the cells and headers, as LaTeX math, so the .tex compiles with pdflatex too.
_TEX_SYMBOLS = {
    "−": "$-$",
    "–": "--",
    "∅": "$\\varnothing$",
    "ρ": "$\\rho$",
    "ω": "$\\omega$",
    "Φ": "$\\Phi$",
    "Γ": "$\\Gamma$",
    "†": "$^\\dagger$",
    "≥": "$\\geq$",
    "→": "$\\to$",
    "|": "$|$",
}


def tex_cell(text) -> str:
    """A cell escaped for LaTeX (cells.tex_escape) with its symbols as math."""
    return "".join(_TEX_SYMBOLS.get(ch, ch) for ch in tex_escape(text))


def csv(grid: Grid) -> str:
    """The full-precision rows (an empty cell for NaN)."""
    return csv_text(grid.records, grid.csv_columns)


def latex(grid: Grid) -> str:
    """A booktabs tabular: left-aligned text columns, the rest right-aligned (or `tex_spec`);
    the caption and notes as comment lines."""
    spec = grid.tex_spec or "".join(
        "l" if k < _text_columns(grid) else "r" for k in range(len(grid.header))
    )
    escape = grid.tex or tex_cell
    header = " & ".join(grid.tex_header or [escape(h) for h in grid.header])
    blocks = [[_tex_row(row, escape) + " \\\\" for row in block] for block in grid.blocks if block]
    notes = [grid.caption, *grid.notes] if grid.caption else list(grid.notes)
    return latex_tabular(spec, header, blocks, notes)


def _tex_row(cells: Sequence[str | None], escape: Callable[[str], str]) -> str:
    """The cells joined by " & " (an absent cell, None, as a bare "&")."""
    parts = []
    for k, cell in enumerate(cells):
        gap = " " if k else ""
        if cell is not None:
            parts.append(gap + (cell if isinstance(cell, TexCell) else escape(cell)))
        if k + 1 < len(cells):
            parts.append(" &")
    return "".join(parts)


def _text_columns(grid: Grid) -> int:
    """How many leading columns hold names (model, task, ...): those before the first number."""
    for k in range(len(grid.header)):
        cells = [row[k] for row in grid.rows if k < len(row) and row[k] is not None]
        if cells and all(_numeric(c) for c in cells):
            return k
    return len(grid.header)


def _numeric(cell: str) -> bool:
    head = cell.split(" ")[0].rstrip("†").replace("–", "").replace("−", "-")
    try:
        float(head or "nan")
    except ValueError:
        return False
    return True


def files(grid: Grid) -> dict[str, str]:
    """{name.md, name.csv, name.tex} -> text."""
    return {
        f"{grid.name}.md": markdown(grid),
        f"{grid.name}.csv": csv(grid),
        f"{grid.name}.tex": latex(grid),
    }
