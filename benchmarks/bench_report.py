"""Benchmark: report.html at n = 1,000 problems x 17 conditions, opened and filtered in headless
chromium.

Writes a synthetic run (every condition, readable texts of realistic length: B's reasoning ~1,500
characters, each continuation ~600), runs `nudge stats` and `nudge report` on it through the
library, then loads report.html in Debian's chromium (tests/helpers/chromium.py) with URL
fragments that set each filter. The page writes into #status the time from navigation start to
its first render (data-open-ms: HTML parse, JSON.parse of the data blob, the first filter, the
visible rows and the selected problem) and the time its filter took (data-filter-ms). Each figure
is the median of --repeats loads. Writes its section of benchmarks/RESULTS.md.

    python benchmarks/bench_report.py [--problems 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from benchkit.results import write_section

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import chromium  # noqa: E402  (the tests' fake run directory and chromium)
from helpers import synthetic_run as synthetic  # noqa: E402

from nudgeability.splice.rundir.records import Record
from nudgeability.stats.report.pipeline import (
    ReportOptions,
    StatsOptions,
    run_report,
    run_stats,
)

FILTERS = {
    "none": "",
    "doubt, well-targeted flips, unaided wrong": "filter=cond:doubt,flip:well,unaided:wrong",
    "any condition, action TOOL": "filter=action:TOOL",
    "search id p09": "filter=q:p09",
}
WORDS = "the model weighs each clue before it commits to an answer or a search".split()


def _padded(line: str, rng: np.random.Generator) -> str:
    record = Record.from_json(line)
    length = 1500 if record.condition == "B" else 600
    words = rng.choice(WORDS, size=length // 5)
    reasoning = " ".join(words)[:length]
    text = reasoning + "</think>" + record.text.split("</think>")[-1]
    cut = None if record.cut is None else len(reasoning)  # the cut moves with the reasoning
    return replace(record, text=text, cut=cut).to_json()


def write_page(tmp: Path, problems: int) -> Path:
    rng = np.random.default_rng(0)
    lines = [
        _padded(line, rng)
        for line in synthetic.records(synthetic.paper_arrays(rng, problems), task="strategyqa")
    ]
    run = synthetic.write_run(tmp / "run", lines, task="strategyqa")
    run_stats(StatsOptions([run], out=tmp / "stats", n_boot=2000))
    run_report(ReportOptions([tmp / "stats"], out=tmp / "report"))
    return tmp / "report" / "report.html"


def measure(page: Path, fragment: str, repeats: int) -> dict:
    found = {"open": [], "filter": [], "wall": [], "count": None}
    for _ in range(repeats):
        start = time.perf_counter()
        dom = chromium.dump_dom(page, fragment)
        found["wall"].append(time.perf_counter() - start)
        status = re.search(r'<div id="status"([^>]*)>', dom).group(1)
        values = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', status))
        found["open"].append(float(values["open-ms"]))
        found["filter"].append(float(values["filter-ms"]))
        found["count"] = int(values["count"])
    return {k: statistics.median(v) if isinstance(v, list) else v for k, v in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if chromium.find_chromium() is None:
        sys.exit("bench_report: no chromium on PATH (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        page = write_page(Path(tmp), args.problems)
        size = page.stat().st_size
        rows = []
        for name, fragment in FILTERS.items():
            m = measure(page, fragment, args.repeats)
            rows.append(
                f"| {name} | {m['count']} | {m['open']:.0f} | {m['filter']:.1f} | {m['wall']:.2f} |"
            )
            print(rows[-1])
    body = "\n".join(
        [
            f"report.html of a synthetic run: {args.problems} problems x 17 conditions, "
            f"{size / 1e6:.1f} MB (data inline). Median of {args.repeats} loads in headless "
            "chromium; open = navigation start to the first render (parse, JSON.parse, first "
            "filter, visible rows, the selected problem), filter = the filter pass alone.",
            "",
            "| filter | problems shown | open (ms) | filter (ms) | chromium process, start to exit (s) |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    write_section("report.html in chromium (benchmarks/bench_report.py)", body)
    print(body)


if __name__ == "__main__":
    main()
