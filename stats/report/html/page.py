"""report.html: one self-contained file (no network: CSS, script, figures and data inline).

Sections: the provenance of every run directory (manifest.json), every table `nudge stats`
writes (their Markdown turned into HTML tables: one rendering of each table, tables/), every
figure `nudge report` draws (its PNG inline), and the problem browser (browser.js over the JSON
of data.py; cuts.js, only when a run forked arms at extra cuts, shows them too). `render_page`
returns the text; report/pipeline.py writes it atomically.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

_HERE = Path(__file__).parent
REPORT_FILE = "report.html"
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def _cells(line: str) -> list[str]:
    return [c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(line.strip())[1:-1]]


def markdown_to_html(text: str) -> str:
    """The Markdown our tables are written in (pipe tables, **captions**, paragraphs) as HTML."""
    out, table = [], []

    def flush() -> None:
        if not table:
            return
        head, body = table[0], [r for r in table[1:] if not set("".join(r)) <= set("-: ")]
        rows = ["<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in head) + "</tr>"]
        rows += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in body]
        out.append('<div class="tablewrap"><table>' + "".join(rows) + "</table></div>")
        table.clear()

    for line in text.splitlines():
        if line.startswith("|"):
            table.append(_cells(line))
            continue
        flush()
        if line.startswith("**") and line.endswith("**"):
            out.append(f"<h3>{html.escape(line.strip('*'))}</h3>")
        elif line.strip():
            out.append(f'<p class="note">{html.escape(line)}</p>')
    flush()
    return "\n".join(out)


def _provenance_html(entries: Sequence[dict]) -> str:
    if not entries:
        return "<p>No run directory was readable: the tables come from stats.json alone.</p>"
    rows = []
    for e in entries:
        experiment = e.get("experiment", {})
        config = e.get("config", {})
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(v))}</td>"
                for v in (
                    e["run_dir"],
                    experiment.get("model", ""),
                    experiment.get("task", ""),
                    experiment.get("decoding", ""),
                    e["cohort"],
                    config.get("n", ""),
                    ", ".join(config.get("conditions", [])),
                    e.get("git_commit") or "",
                )
            )
            + "</tr>"
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in ("Run", "Model", "Task", "Decoding", "Cohort", "n", "Conditions", "Commit")
    )
    raw = html.escape(json.dumps(entries, indent=1, ensure_ascii=False))
    return (
        f'<div class="tablewrap"><table><tr>{head}</tr>{"".join(rows)}</table></div>'
        f"<details><summary>Every setting and input digest (from manifest.json)</summary>"
        f"<pre>{raw}</pre></details>"
    )


def _figures_html(figures: Sequence[Path]) -> str:
    parts = []
    for path in figures:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(
            f'<h3>{html.escape(path.stem)}</h3><img class="figure" alt="{html.escape(path.stem)}" '
            f'src="data:image/png;base64,{data}">'
        )
    return "\n".join(parts) or "<p>No figure.</p>"


_FILTERS = """
<div id="filters">
 <label for="f-exp">Experiment</label><select id="f-exp"></select>
 <label for="f-cond">Condition</label><select id="f-cond"></select>
 <label for="f-action">Action</label><select id="f-action"></select>
 <label for="f-flip">Flip</label><select id="f-flip"><option value="">any</option>
  <option value="any">a flip</option><option value="well">well-targeted flip</option>
  <option value="ill">ill-targeted flip</option><option value="none">no flip</option></select>
 <label for="f-unaided">Unaided</label><select id="f-unaided"><option value="">any</option>
  <option value="right">right</option><option value="wrong">wrong</option>
  <option value="unknown">not graded</option></select>
 <label for="f-q">Problem id</label><input id="f-q" type="search" placeholder="search by id">
</div>"""


def render_page(
    tables: Mapping[str, str], figures: Sequence[Path], data: dict, title: str = "nudge report"
) -> str:
    """The page (module docstring). `tables`: Markdown file name -> text, in order; `figures`:
    PNG paths; `data`: browser_data's JSON."""
    blob = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    tables_html = "\n".join(
        f'<div class="table" data-file="{html.escape(name)}">{markdown_to_html(text)}</div>'
        for name, text in tables.items()
    )
    css = (_HERE / "page.css").read_text(encoding="utf-8")
    scripts = ["browser.js"]
    if any("cuts" in e for e in data.get("experiments", [])):
        scripts.append("cuts.js")
    script = "\n".join(
        f"<script>{(_HERE / name).read_text(encoding='utf-8')}</script>" for name in scripts
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{css}</style></head>
<body>
<header><h1>{html.escape(title)}</h1>
<nav><a href="#sec-browser">Problems</a><a href="#sec-tables">Tables</a><a href="#sec-figures">Figures</a><a href="#sec-provenance">Provenance</a></nav></header>
<main>
<section id="sec-browser"><h2>Problems</h2>
<div id="browser"><div id="listpane">{_FILTERS}
<div id="status"></div><div id="list"><div id="spacer"><div id="rows"></div></div></div></div>
<div id="detail"></div></div></section>
<section id="sec-tables"><h2>Tables</h2>{tables_html}</section>
<section id="sec-figures"><h2>Figures</h2>{_figures_html(figures)}</section>
<section id="sec-provenance"><h2>Provenance</h2>{_provenance_html(data.get("provenance", []))}</section>
</main>
<script id="data" type="application/json">{blob}</script>
{script}
</body></html>
"""
