"""`nudge stats` and `nudge report`: from run directories to stats.json, tables and figures.

nudge stats RUN_DIR... [--label RUN_DIR=NAME]... [--out DIR] [--n-boot N] [--seed S]
        [--min-s PP] [--min-l PP]
    joins the records (records.py), summarises each experiment (summary.py) and writes
    DIR/stats.json and DIR/table.md, table.csv, table.tex, together and atomically (a kill or a
    full disk leaves the previous files). Runs of one model x task x decoding made with other
    settings are refused unless labelled apart. --min-s / --min-l are the profile thresholds
    (profiles.py; defaults 10 and 5 pp). Runs made with `nudge run --resolve` add their
    delegation value (delegation_cli.py) to stats.json and delegation_value.md/csv/tex.
    When the runs stored uncertainty signals, also
    DIR/grounding.json, grounding.md, grounding.csv (grounding_report.py; --folds).
nudge report STATS_DIR_OR_RUN_DIR... [--out DIR] [--n-boot N] [--seed S]
    draws the figures (figures.py) as PNG and PDF, from stats.json files (a directory holding
    one, or the file itself) or straight from run directories.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from nudgeability.models.atomic import atomic_write_files, remove_temporaries
from nudgeability.splice.rundir.layout import MANIFEST

from .across import AcrossExperiments, across_experiments
from .delegation_cli import (
    draw_value,
    summarize_value_run_dirs,
    value_document,
    value_files,
    values_from_document,
)
from .delegation_summary import DelegationValueSummary
from .figures import draw_all
from .profiles import DEFAULT_MIN_L, DEFAULT_MIN_S, ProfileRule
from .records import RecordsError, load_experiments
from .report_tables import cohorts, render_csv, render_latex, render_markdown
from .serialize import from_jsonable, to_jsonable
from .summary import ExperimentSummary, summarize

STATS_FILE = "stats.json"
TABLE_FILES = ("table.md", "table.csv", "table.tex")
SCHEMA_VERSION = 1


def summarize_run_dirs(
    run_dirs: Sequence[str | Path],
    n_boot: int = 20000,
    seed: int = 0,
    profile_rule: ProfileRule | None = None,
    labels: Mapping[str | Path, str] | None = None,
) -> list[ExperimentSummary]:
    """Summaries of every experiment found in the run directories (see `load_experiments`).

    Warns on stderr, one line per experiment, when no problem has a competence label."""
    summaries = []
    for table in load_experiments(run_dirs, labels):
        if not (table.s >= 0).any():
            label = table.label
            print(
                f"nudge stats: warning: {label.model} / {label.task} / {label.decoding}: no NT "
                "record has a grade, so no problem has a competence label; WT, WTrand and L are "
                "undefined (run the NT condition, with a task whose answers can be graded)",
                file=sys.stderr,
            )
        summaries.append(summarize(table, n_boot=n_boot, seed=seed, profile_rule=profile_rule))
    return summaries


def stats_document(
    summaries: Sequence[ExperimentSummary],
    run_dirs: Sequence[str | Path],
    values: Sequence[DelegationValueSummary] = (),
) -> dict:
    """The content of stats.json: the experiments, medians / Spearman rho per decoding config (a
    continuation level below token gets its own group, see `report_tables.cohorts`), and
    the delegation value of the resolved experiments (if any)."""
    across = {key: across_experiments(group) for key, group in cohorts(summaries).items()}
    return {
        "schema": SCHEMA_VERSION,
        "run_dirs": [str(p) for p in run_dirs],
        "experiments": to_jsonable(list(summaries)),
        "across": to_jsonable(across),
        **value_document(values),
    }


def write_stats(
    summaries: Sequence[ExperimentSummary],
    run_dirs: Sequence[str | Path],
    out: str | Path,
    values: Sequence[DelegationValueSummary] = (),
) -> list[Path]:
    """Write stats.json and the table files (the delegation-value tables too, when `values`)
    into `out` together and atomically (all are complete on disk before any replaces its old
    version); return their paths. Temporaries a killed earlier write left behind are removed
    first."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    remove_temporaries(out, only_abandoned=True)
    contents = {
        STATS_FILE: json.dumps(
            stats_document(summaries, run_dirs, values), indent=1, ensure_ascii=False
        )
        + "\n",
        "table.md": render_markdown(summaries),
        "table.csv": render_csv(summaries),
        "table.tex": render_latex(summaries),
        **value_files(values),
    }
    return atomic_write_files({out / name: text.encode("utf-8") for name, text in contents.items()})


def read_stats(path: str | Path) -> list[ExperimentSummary]:
    """The experiment summaries of a stats.json (or of a directory holding one)."""
    path = Path(path)
    file = path / STATS_FILE if path.is_dir() else path
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordsError(f"{file}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA_VERSION:
        raise RecordsError(
            f"{file}: not a stats.json of schema {SCHEMA_VERSION}; rerun `nudge stats`"
        )
    try:
        return from_jsonable(list[ExperimentSummary], document["experiments"])
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordsError(f"{file}: {exc}") from None


def read_values(path: str | Path) -> list[DelegationValueSummary]:
    """The delegation-value summaries stored in a stats.json ([] when it holds none)."""
    file = Path(path) / STATS_FILE if Path(path).is_dir() else Path(path)
    try:
        return values_from_document(json.loads(file.read_text(encoding="utf-8")))
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordsError(f"{file}: {exc}") from None


def read_across(path: str | Path) -> dict[str, AcrossExperiments]:
    """The per-decoding medians and Spearman rho stored in a stats.json."""
    file = Path(path) / STATS_FILE if Path(path).is_dir() else Path(path)
    return from_jsonable(
        dict[str, AcrossExperiments], json.loads(file.read_text(encoding="utf-8"))["across"]
    )


def _is_stats(path: Path) -> bool:
    return (path.is_dir() and (path / STATS_FILE).is_file()) or (
        path.is_file() and path.name.endswith(".json")
    )


def ground_run_dirs(
    run_dirs: Sequence[str | Path],
    n_boot: int = 20000,
    seed: int = 0,
    folds: int = 5,
    labels: Mapping[str | Path, str] | None = None,
) -> list:
    """Grounded-nudge summaries (grounding_summary.ground) of the experiments that stored signals."""
    from .grounding_summary import ground
    from .signal_records import load_signals

    out = []
    for table in load_experiments(run_dirs, labels):
        rows = list(zip(table.problem_ids, table.seed.tolist()))
        data = load_signals(run_dirs, table.label.key, rows, labels)
        result = ground(table, data, folds=folds, n_boot=n_boot, seed=seed)
        if result is not None:
            out.append(result)
    return out


def _labels(pairs: Sequence[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        directory, sep, name = pair.rpartition("=")
        if not sep or not directory or not name.strip():
            raise RecordsError(f"--label {pair}: expected RUN_DIR=NAME")
        labels[directory] = name.strip()
    return labels


def _run_stats(args: argparse.Namespace) -> int:
    from .grounding_report import write_grounding

    summaries = summarize_run_dirs(
        args.run_dirs,
        n_boot=args.n_boot,
        seed=args.seed,
        profile_rule=_rule(args),
        labels=_labels(args.label),
    )
    values = summarize_value_run_dirs(
        args.run_dirs, n_boot=args.n_boot, seed=args.seed, labels=_labels(args.label)
    )
    for path in write_stats(summaries, args.run_dirs, args.out, values):
        print(path)
    grounding = ground_run_dirs(
        args.run_dirs, args.n_boot, args.seed, args.folds, labels=_labels(args.label)
    )
    for path in write_grounding(grounding, args.out):
        print(path)
    return 0


def _run_report(args: argparse.Namespace) -> int:
    from .grounding_report import draw_grounding, read_grounding

    summaries: list[ExperimentSummary] = []
    grounding = []
    values: list[DelegationValueSummary] = []
    run_dirs = []
    for source in map(Path, args.sources):
        if _is_stats(source):
            summaries += read_stats(source)
            grounding += read_grounding(source if source.is_dir() else source.parent)
            values += read_values(source)
        elif source.is_dir() and not (source / MANIFEST).exists():
            raise RecordsError(
                f"{source}: holds no {STATS_FILE} (written by `nudge stats --out`) and no "
                "manifest.json (written by `nudge run`); pass a directory made by one of them"
            )
        else:
            run_dirs.append(source)
    if run_dirs:
        summaries += summarize_run_dirs(
            run_dirs, n_boot=args.n_boot, seed=args.seed, profile_rule=_rule(args)
        )
        values += summarize_value_run_dirs(run_dirs, n_boot=args.n_boot, seed=args.seed)
        grounding += ground_run_dirs(run_dirs, args.n_boot, args.seed)
    paths = draw_all(summaries, args.out) + draw_value(values, args.out)
    for path in paths + draw_grounding(grounding, args.out):
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
    stats = subparsers.add_parser(
        "stats", help="estimate S, WT, WTrand, L and diagnostics; write stats.json and tables"
    )
    stats.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="run directories (manifest.json + records.jsonl)",
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
        default=5,
        help="cross-fitting folds of the grounded-nudge signals (default 5)",
    )
    _add_profile_options(stats)
    stats.set_defaults(func=_run_stats)

    report = subparsers.add_parser("report", help="draw the figures (PNG and PDF)")
    report.add_argument(
        "sources",
        nargs="+",
        metavar="STATS_DIR_OR_RUN_DIR",
        help="stats.json directories or run directories",
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
