"""`nudge report STATS_DIR_OR_RUN_DIR... --out DIR`: flags, one library call, printing.

nudge report STATS_DIR_OR_RUN_DIR... [--out DIR] [--n-boot N] [--seed S] [--min-s PP] [--min-l PP]
    draws the figures as PNG and PDF and writes report.html (every table and figure, the runs'
    provenance, the problem browser over the records of the run directories the stats name),
    from stats.json files (a directory holding one, or the file itself) or straight from run
    directories: nudgeability.stats.report.pipeline.run_report.

`report_run(OUT)` is what `nudge run` does after a run: `nudge stats OUT --out OUT-report`, then
`nudge report OUT-report --out OUT-report`, and print where report.html is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nudgeability.stats.report.document import STATS_FILE
from nudgeability.stats.report.html.page import REPORT_FILE
from nudgeability.stats.report.pipeline import ReportOptions, StatsOptions, run_report, run_stats

from . import check_out
from .stats import add_profile_options, positive, rule, warn


def _run_report(args: argparse.Namespace) -> int:
    check_out(args.out)
    options = ReportOptions(
        sources=args.sources,
        out=args.out,
        n_boot=args.n_boot,
        seed=args.seed,
        profile_rule=rule(args),
    )
    for path in run_report(options, warn=warn).written:
        print(path)
    return 0


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


def report_dir(out: Path) -> Path:
    """Where `nudge run` writes the stats and report of run directory `out`: OUT-report/."""
    return out.with_name(out.name + "-report")


def report_run(out: Path) -> Path:
    """`nudge stats OUT --out OUT-report` then `nudge report OUT-report --out OUT-report`, and the
    lines that say where report.html is (and why a report is empty: n_S = 0)."""
    target = report_dir(out)
    found = run_stats(StatsOptions([out], out=target), warn=warn)
    run_report(ReportOptions([target], out=target), warn=warn)
    empty = [e for e in found.summaries if e.n_S == 0]
    for e in empty:
        print(
            f"nudge run: {e.model} / {e.task}: n_S = 0: no problem has both the confidence and "
            "the doubt arm completed (on MuSiQue SmolLM2 never closes its thinking, so no arm "
            "is forked); the report shows the empty shape. `nudge run --task strategyqa` fills it.",
            file=sys.stderr,
        )
    page = target / REPORT_FILE
    print(
        f"nudge run: stats, tables and figures in {target}; open {page.resolve().as_uri()}",
        file=sys.stderr,
    )
    print(page)
    return page
