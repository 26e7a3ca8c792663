"""`nudge stats RUN_DIR... --out DIR`: flags, one library call, printing.

nudge stats RUN_DIR... [--label RUN_DIR=NAME]... [--out DIR] [--n-boot N] [--seed S]
        [--folds K] [--min-s PP] [--min-l PP]
    summarises the run directories and writes DIR/stats.json and the tables (table.md, .csv,
    .tex; the paper's tables by number, table1.*, table4.* ... table9.*, sealed.*, summaries.*;
    delegation_value.* for runs made with `nudge run --resolve`; grounding.json, .md, .csv
    for runs that stored uncertainty signals; by_position.* for runs made with `nudge run
    --cuts`), together and atomically:
    nudgeability.stats.report.pipeline.run_stats.

What each file holds: stats/report/document.py; the profile thresholds:
stats/estimators/profiles.py. The option types here are shared with `nudge report`
(cli/report.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from nudgeability.splice.rundir.layout import MANIFEST, RECORDS
from nudgeability.stats.estimators.profiles import DEFAULT_MIN_L, DEFAULT_MIN_S, ProfileRule
from nudgeability.stats.grounding.signals import DEFAULT_FOLDS
from nudgeability.stats.records import RecordsError
from nudgeability.stats.report.document import STATS_FILE
from nudgeability.stats.report.pipeline import StatsOptions, run_stats

from .values import check_out


def warn(message: str) -> None:
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
    check_out(args.out)
    labels = _labels(args.label)
    return write_and_print(
        run_stats, StatsOptions, args, run_dirs=args.run_dirs, folds=args.folds, labels=labels
    )


def write_and_print(run, options_type, args: argparse.Namespace, **own) -> int:
    """`nudge stats` and `nudge report` alike, once --out is checked: call `run` (the pipeline's
    run_stats or run_report) with the options they share (--out, --n-boot, --seed, the profile
    rule) and the command's `own`, and print each file written."""
    shared = dict(out=args.out, n_boot=args.n_boot, seed=args.seed, profile_rule=rule(args))
    for path in run(options_type(**shared, **own), warn=warn).written:
        print(path)
    return 0


def rule(args: argparse.Namespace) -> ProfileRule:
    return ProfileRule(min_S=args.min_s, min_L=args.min_l)


def points(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a number of pp >= 0, got {text}")
    return value


def add_profile_options(parser) -> None:
    parser.add_argument(
        "--min-s",
        type=points,
        default=DEFAULT_MIN_S,
        metavar="PP",
        help=f"profiles: smallest |S| that counts as a large swing (default {DEFAULT_MIN_S:g} pp)",
    )
    parser.add_argument(
        "--min-l",
        type=points,
        default=DEFAULT_MIN_L,
        metavar="PP",
        help="profiles: smallest |L| that counts as selective or misdirected "
        f"(default {DEFAULT_MIN_L:g} pp); 0 and 0 read the labels from the intervals alone",
    )


def positive(text: str) -> int:
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
        "--n-boot", type=positive, default=20000, help="bootstrap replicates (default 20000)"
    )
    stats.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    stats.add_argument(
        "--folds",
        type=_at_least_two,
        default=DEFAULT_FOLDS,
        help=f"cross-fitting folds of the grounded-nudge signals (default {DEFAULT_FOLDS})",
    )
    add_profile_options(stats)
    stats.set_defaults(func=_run_stats)
