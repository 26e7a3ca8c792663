"""`nudge report STATS_DIR_OR_RUN_DIR... --out DIR`: flags, one library call, printing.

nudge report STATS_DIR_OR_RUN_DIR... [--out DIR] [--n-boot N] [--seed S] [--min-s PP] [--min-l PP]
    draws the figures as PNG and PDF and writes report.html (every table and figure, the runs'
    provenance, the problem browser over the records of the run directories the stats name),
    from stats.json files (a directory holding one, or the file itself) or straight from run
    directories: nudgeability.stats.report.pipeline.run_report.

`report_run(OUT)` is what `nudge run` does after a run: `nudge stats OUT --out OUT-report`, then
`nudge report OUT-report --out OUT-report` (nudgeability.stats.report.pipeline.report_run), and
print where report.html is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nudgeability.stats.report import pipeline
from nudgeability.stats.report.document import STATS_FILE
from nudgeability.stats.report.pipeline import ReportOptions, run_report

from .stats import add_profile_options, positive, warn, write_and_print
from .values import check_out


def _run_report(args: argparse.Namespace) -> int:
    check_out(args.out)
    return write_and_print(run_report, ReportOptions, args, sources=args.sources)


def register(subparsers) -> None:
    """Add the `report` subcommand to the `nudge` parser."""
    report = subparsers.add_parser(
        "report", help="draw the figures (PNG and PDF) and write report.html"
    )
    report.add_argument(
        "sources",
        nargs="+",
        metavar="STATS_DIR_OR_RUN_DIR",
        help=f"{STATS_FILE} directories or run directories",
    )
    report.add_argument("--out", default="report", help="output directory (default: ./report)")
    report.add_argument(
        "--n-boot", type=positive, default=20000, help="replicates when reading run directories"
    )
    report.add_argument(
        "--seed", type=int, default=0, help="bootstrap seed when reading run directories"
    )
    add_profile_options(report)
    report.set_defaults(func=_run_report)


def report_run(out: Path) -> Path:
    """The stats and report of run directory `out` in OUT-report/, and the lines that say where
    report.html is (and why a report is empty: n_S = 0)."""
    written = pipeline.report_run(out, warn=warn)
    for reason in written.empty:
        print(f"nudge run: {reason}", file=sys.stderr)
    print(
        f"nudge run: stats, tables and figures in {written.out}; open {written.page.resolve().as_uri()}",
        file=sys.stderr,
    )
    print(written.page)
    return written.page
