"""One table as a grid of display cells plus full-precision CSV rows, rendered three ways.

Every numbered table of the paper (paper.py, cohort.py) is built as a `Grid`: a caption, the
header, body blocks of display cells (rounded, '–' for undefined, intervals in brackets), the same
rows as dicts of full-precision numbers for the CSV, and notes printed under the table. `markdown`,
`csv` and `latex` turn it into the three files, so no table writes its own formatting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..cells import csv_text, latex_tabular, tex_escape


@dataclass(frozen=True)
class Grid:
    """A table: `blocks` of display rows (a rule between blocks), `records` for the CSV."""

    name: str  # the file stem: table6 -> table6.md, table6.csv, table6.tex
    caption: str
    header: Sequence[str]
    blocks: Sequence[Sequence[Sequence[str]]]
    csv_columns: Sequence[str]
    records: Sequence[dict] = field(default_factory=list)
    notes: Sequence[str] = ()

    @property
    def rows(self) -> list[Sequence[str]]:
        return [row for block in self.blocks for row in block]


def markdown(grid: Grid) -> str:
    """`**caption**`, the pipe table (blocks one after another), then the notes as paragraphs."""
    lines = [f"**{grid.caption}**", ""]
    lines += [_md_row(grid.header), "|" + "---|" * len(grid.header)]
    if not grid.rows:
        lines.append(_md_row(["–"] * len(grid.header)))
    lines += [_md_row(row) for row in grid.rows]
    for note in grid.notes:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def _md_row(cells: Sequence[str]) -> str:
    """A pipe-table row; a '|' inside a cell (|∅ − B|) is escaped so it does not split it."""
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


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
    """A booktabs tabular: left-aligned text columns, the rest right-aligned; the caption and
    notes as comment lines."""
    spec = "".join("l" if k < _text_columns(grid) else "r" for k in range(len(grid.header)))
    header = " & ".join(tex_cell(h) for h in grid.header)
    blocks = [
        [" & ".join(tex_cell(cell) for cell in row) + " \\\\" for row in block]
        for block in grid.blocks
        if block
    ]
    return latex_tabular(spec, header, blocks, [grid.caption, *grid.notes])


def _text_columns(grid: Grid) -> int:
    """How many leading columns hold names (model, task, ...): those before the first number."""
    for k in range(len(grid.header)):
        cells = [row[k] for row in grid.rows if k < len(row)]
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
