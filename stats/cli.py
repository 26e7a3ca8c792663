"""`nudge stats` and `nudge report`: flags, one library call each, printing.

nudge stats RUN_DIR... [--label RUN_DIR=NAME]... [--out DIR] [--n-boot N] [--seed S]
        [--folds K] [--min-s PP] [--min-l PP]
    summarises the run directories and writes DIR/stats.json and the tables (table.md, .csv,
    .tex; delegation_value.* for runs made with `nudge run --resolve`; grounding.json, .md, .csv
    for runs that stored uncertainty signals), together and atomically:
    report.pipeline.run_stats.
nudge report STATS_DIR_OR_RUN_DIR... [--out DIR] [--n-boot N] [--seed S] [--min-s PP] [--min-l PP]
    draws the figures as PNG and PDF, from stats.json files (a directory holding one, or the
    file itself) or straight from run directories: report.pipeline.run_report.

What each file holds: report/document.py; the profile thresholds: estimators/profiles.py.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from nudgeability.splice.rundir.layout import MANIFEST, RECORDS

from .estimators.profiles import DEFAULT_MIN_L, DEFAULT_MIN_S, ProfileRule
from .grounding.signals import DEFAULT_FOLDS
from .records import RecordsError
from .report.document import STATS_FILE
from .report.pipeline import ReportOptions, StatsOptions, run_report, run_stats


def _warn(message: str) -> None:
    print(f"nudge stats: warning: {message}", file=sys.stderr)


def _labels(pairs: Sequence[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        directory, sep, name = pair.rpartition("=")
        if not sep or not directory or not name.strip():
            raise RecordsError(f"--label {pair}: expected RUN_DIR=NAME")
        labels[directory] = name.strip()
    return labels


def _run_stats(args: argparse.Namespace) -> int:
    options = StatsOptions(
        run_dirs=args.run_dirs,
        out=args.out,
        n_boot=args.n_boot,
        seed=args.seed,
        folds=args.folds,
        profile_rule=_rule(args),
        labels=_labels(args.label),
    )
    for path in run_stats(options, warn=_warn).written:
        print(path)
    return 0


def _run_report(args: argparse.Namespace) -> int:
    options = ReportOptions(
        sources=args.sources,
        out=args.out,
        n_boot=args.n_boot,
        seed=args.seed,
        profile_rule=_rule(args),
    )
    for path in run_report(options, warn=_warn).written:
        print(path)
    return 0


def _rule(args: argparse.Namespace) -> ProfileRule:
    return ProfileRule(min_S=args.min_s, min_L=args.min_l)


def _points(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a number of pp >= 0, got {text}")
    return value


def _add_profile_options(parser) -> None:
    parser.add_argument(
        "--min-s",
        type=_points,
        default=DEFAULT_MIN_S,
        metavar="PP",
        help=f"profiles: smallest |S| that counts as a large swing (default {DEFAULT_MIN_S:g} pp)",
    )
    parser.add_argument(
        "--min-l",
        type=_points,
        default=DEFAULT_MIN_L,
        metavar="PP",
        help="profiles: smallest |L| that counts as selective or misdirected "
        f"(default {DEFAULT_MIN_L:g} pp); 0 and 0 read the labels from the intervals alone",
    )


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def _at_least_two(text: str) -> int:
    value = int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"expected an integer >= 2, got {text}")
    return value


def register(subparsers) -> None:
    """Add the `stats` and `report` subcommands to the `nudge` parser."""
    register_stats(subparsers)
    register_report(subparsers)


def register_stats(subparsers) -> None:
    """Add the `stats` subcommand to the `nudge` parser."""
    stats = subparsers.add_parser(
        "stats", help=f"estimate S, WT, WTrand, L and diagnostics; write {STATS_FILE} and tables"
    )
    stats.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help=f"run directories ({MANIFEST} + {RECORDS})",
    )
    stats.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="RUN_DIR=NAME",
        help="keep this run as its own row, its model shown as 'model (NAME)' (repeatable); "
        "runs with the same name still pool",
    )
    stats.add_argument("--out", default="stats", help="output directory (default: ./stats)")
    stats.add_argument(
        "--n-boot", type=_positive, default=20000, help="bootstrap replicates (default 20000)"
    )
    stats.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    stats.add_argument(
        "--folds",
        type=_at_least_two,
        default=DEFAULT_FOLDS,
        help=f"cross-fitting folds of the grounded-nudge signals (default {DEFAULT_FOLDS})",
    )
    _add_profile_options(stats)
    stats.set_defaults(func=_run_stats)


def register_report(subparsers) -> None:
    """Add the `report` subcommand to the `nudge` parser."""
    report = subparsers.add_parser("report", help="draw the figures (PNG and PDF)")
    report.add_argument(
        "sources",
        nargs="+",
        metavar="STATS_DIR_OR_RUN_DIR",
        help=f"{STATS_FILE} directories or run directories",
    )
    report.add_argument("--out", default="report", help="output directory (default: ./report)")
    report.add_argument(
        "--n-boot", type=_positive, default=20000, help="replicates when reading run directories"
    )
    report.add_argument(
        "--seed", type=int, default=0, help="bootstrap seed when reading run directories"
    )
    _add_profile_options(report)
    report.set_defaults(func=_run_report)
