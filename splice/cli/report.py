"""`nudge report STATS_DIR_OR_RUN_DIR... --out DIR`: flags, one library call, printing.

nudge report STATS_DIR_OR_RUN_DIR... [--out DIR] [--n-boot N] [--seed S] [--min-s PP] [--min-l PP]
    draws the figures as PNG and PDF and writes report.html (every table and figure, the runs'
    provenance, the problem browser over the records of the run directories the stats name),
    from stats.json files (a directory holding one, or the file itself) or straight from run
    directories: nudgeability.stats.report.pipeline.run_report.
"""

from __future__ import annotations

import argparse

from nudgeability.stats.report.document import STATS_FILE
from nudgeability.stats.report.pipeline import ReportOptions, run_report

from .stats import add_profile_options, positive, rule, warn


def _run_report(args: argparse.Namespace) -> int:
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
    report = subparsers.add_parser("report", help="draw the figures (PNG and PDF) and write report.html")
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
