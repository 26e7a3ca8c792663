"""The pipelines of `nudge stats` and `nudge report`, as library functions returning results.

    result = run_stats(StatsOptions(run_dirs=["runs/a"], out="stats"))
    result.summaries, result.values, result.grounding, result.written

`run_stats` joins the run directories' records once (records/), summarises every experiment
(estimators/summary.py), the delegation value of the resolved ones (delegation/), the grounded
nudges of those that stored signals (grounding/) and the by-position view of those whose arms
were also forked at extra cuts (position/), then writes stats.json, grounding.json and
every table together and atomically (document.py): an error anywhere leaves the previous files.
`run_report` reads stats.json files (or summarises run directories the same way) and draws the
figures (figures/). `report_run` is what `nudge run` does after a run: both, into OUT-report/, and
a line for each experiment whose report is empty (n_S = 0) saying why. The command line
(cli/stats.py, cli/report.py) only parses flags, calls these and prints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nudgeability.models.smollm2 import ALIAS as SMOLLM2
from nudgeability.splice.rundir.layout import MANIFEST
from nudgeability.util.atomic import atomic_write_files

from ..delegation.join import load_value_tables
from ..delegation.summary import DelegationValueSummary, summarize_value
from ..estimators.openers import ExperimentOpeners, experiment_openers
from ..estimators.profiles import ProfileRule
from ..estimators.samples import ExperimentSamples, experiment_samples
from ..estimators.summary import ExperimentSummary, summarize
from ..grounding.join import load_signals
from ..grounding.signals import DEFAULT_FOLDS
from ..grounding.summary import GroundingSummary, ground
from ..position.estimators import PositionSummary, summarize_positions
from ..position.join import position_tables
from ..records import RecordsError, gather_experiments
from ..table import ExperimentTable
from .document import (
    STATS_FILE,
    is_stats,
    read_grounding,
    read_openers,
    read_positions,
    read_run_dirs,
    read_samples,
    read_stats,
    read_values,
    stats_files,
    write_files,
)
from .figures.delegation import draw_value
from .figures.experiments import draw_all
from .figures.grounding import draw_grounding
from .figures.position import draw_positions
from .html.data import browser_data
from .html.page import REPORT_FILE, render_page

Warn = Callable[[str], None]  # told each warning as it arises (the CLI prints it)


@dataclass(frozen=True)
class Summaries:
    """Everything computed from a set of run directories."""

    summaries: list[ExperimentSummary]
    values: list[DelegationValueSummary]  # experiments with resolutions only
    grounding: list[GroundingSummary]  # experiments with uncertainty signals only
    warnings: list[str]
    positions: list[PositionSummary] = field(default_factory=list)  # runs with extra cuts only
    openers: list[ExperimentOpeners] = field(default_factory=list)  # runs with --likelihoods only
    samples: list[ExperimentSamples] = field(default_factory=list)  # --samples-per-arm only


def no_label_warning(table: ExperimentTable) -> str:
    """The warning for an experiment in which no problem has a competence label."""
    label = table.label
    return (
        f"{label.model} / {label.task} / {label.decoding}: no NT record has a grade, so no "
        "problem has a competence label; WT, WTrand and L are undefined (run the NT condition, "
        "with a task whose answers can be graded)"
    )


def summarize_runs(
    run_dirs: Sequence[str | Path],
    *,
    n_boot: int = 20000,
    seed: int = 0,
    folds: int = DEFAULT_FOLDS,
    profile_rule: ProfileRule | None = None,
    labels: Mapping[str | Path, str] | None = None,
    warn: Warn | None = None,
) -> Summaries:
    """Every summary of the experiments in `run_dirs` (pooled and labelled as
    records.load_experiments says), with the same bootstrap seed and replicates for all."""
    warnings: list[str] = []
    summaries = []
    gathered = gather_experiments(run_dirs, labels)
    tables = [experiment.table() for experiment in gathered]
    cut_tables = [
        position_tables(e.records, e.label, e.conditions, known=e.known)
        for e in gathered
        if e.has_cuts
    ]
    openers = [experiment_openers(e.records, e.label, n_boot=n_boot, seed=seed) for e in gathered]
    sampled = [
        experiment_samples(e.records, e.label, n_boot=n_boot, seed=seed, known=e.known)
        for e in gathered
    ]
    del gathered  # every table is made: a campaign's records need not stay in memory
    positions = [summarize_positions(t, n_boot=n_boot, seed=seed) for t in cut_tables]
    for table in tables:
        if not (table.s >= 0).any():
            warnings.append(no_label_warning(table))
            if warn is not None:
                warn(warnings[-1])
        summaries.append(summarize(table, n_boot=n_boot, seed=seed, profile_rule=profile_rule))
    values = [
        summarize_value(t, n_boot=n_boot, seed=seed) for t in load_value_tables(run_dirs, labels)
    ]
    grounding = []
    for table in tables:
        rows = list(zip(table.problem_ids, table.seed.tolist()))
        signals = load_signals(run_dirs, table.label.key, rows, labels)
        found = ground(table, signals, folds=folds, n_boot=n_boot, seed=seed)
        if found is not None:
            grounding.append(found)
    return Summaries(
        summaries,
        values,
        grounding,
        warnings,
        positions,
        [o for o in openers if o is not None],
        [s for s in sampled if s is not None],
    )


@dataclass(frozen=True)
class StatsOptions:
    """What `nudge stats` is asked (its flags)."""

    run_dirs: Sequence[str | Path]
    out: str | Path = "stats"
    n_boot: int = 20000
    seed: int = 0
    folds: int = DEFAULT_FOLDS
    profile_rule: ProfileRule = field(default_factory=ProfileRule)
    labels: Mapping[str | Path, str] = field(default_factory=dict)  # run dir -> row name


@dataclass(frozen=True)
class Written(Summaries):
    """What `nudge stats` or `nudge report` computed or read, and the files it wrote, in order."""

    written: list[Path] = field(default_factory=list)


def run_stats(options: StatsOptions, warn: Warn | None = None) -> Written:
    """Summarise the run directories and write every output file (module docstring)."""
    found = summarize_runs(
        options.run_dirs,
        n_boot=options.n_boot,
        seed=options.seed,
        folds=options.folds,
        profile_rule=options.profile_rule,
        labels=options.labels,
        warn=warn,
    )
    files = stats_files(
        found.summaries,
        options.run_dirs,
        found.values,
        found.grounding,
        found.positions,
        found.openers,
        found.samples,
    )
    return Written(**vars(found), written=write_files(options.out, files))


@dataclass(frozen=True)
class ReportOptions:
    """What `nudge report` is asked (its flags): stats.json files or directories holding one,
    and run directories, summarised with `n_boot`, `seed` and `profile_rule`."""

    sources: Sequence[str | Path]
    out: str | Path = "report"
    n_boot: int = 20000
    seed: int = 0
    profile_rule: ProfileRule = field(default_factory=ProfileRule)


def run_report(options: ReportOptions, warn: Warn | None = None) -> Written:
    """Read or compute the summaries of every source, then draw every figure into `out`."""
    summaries: list[ExperimentSummary] = []
    values: list[DelegationValueSummary] = []
    grounding: list[GroundingSummary] = []
    positions: list[PositionSummary] = []
    openers: list[ExperimentOpeners] = []
    samples: list[ExperimentSamples] = []
    run_dirs, recorded = [], []  # given as sources; named by a stats.json
    for source in map(Path, options.sources):
        if is_stats(source):
            summaries += read_stats(source)
            recorded += read_run_dirs(source)
            grounding += read_grounding(source if source.is_dir() else source.parent)
            values += read_values(source)
            positions += read_positions(source)
            openers += read_openers(source)
            samples += read_samples(source)
        elif source.is_dir() and not (source / MANIFEST).exists():
            raise RecordsError(
                f"{source}: holds no {STATS_FILE} (written by `nudge stats --out`) and no "
                f"{MANIFEST} (written by `nudge run`); pass a directory made by one of them"
            )
        else:
            run_dirs.append(source)
    warnings: list[str] = []
    if run_dirs:
        found = summarize_runs(
            run_dirs,
            n_boot=options.n_boot,
            seed=options.seed,
            profile_rule=options.profile_rule,
            warn=warn,
        )
        summaries += found.summaries
        values += found.values
        grounding += found.grounding
        positions += found.positions
        openers += found.openers
        samples += found.samples
        warnings = found.warnings
    written = draw_all(summaries, options.out) + draw_value(values, options.out)
    written += draw_grounding(grounding, options.out)
    written += draw_positions(positions, options.out)
    written += write_html(
        options.out,
        summaries,
        values,
        grounding,
        [*recorded, *run_dirs],
        written,
        positions,
        openers,
        samples,
    )
    return Written(summaries, values, grounding, warnings, positions, openers, samples, written)


def report_dir(run_dir: str | Path) -> Path:
    """Where `nudge run` writes the stats and report of run directory `run_dir`: RUN_DIR-report/."""
    run_dir = Path(run_dir)
    return run_dir.with_name(run_dir.name + "-report")


@dataclass(frozen=True)
class RunReport:
    """What `report_run` wrote: the directory, its report.html, and why a report is empty."""

    out: Path
    page: Path
    empty: list[str]  # `empty_report_reason` of each experiment with n_S = 0


def report_run(run_dir: str | Path, warn: Warn | None = None) -> RunReport:
    """`nudge stats RUN_DIR --out RUN_DIR-report`, then `nudge report RUN_DIR-report --out
    RUN_DIR-report`: the stats, tables, figures and report.html of one finished run."""
    target = report_dir(run_dir)
    found = run_stats(StatsOptions([run_dir], out=target), warn=warn)
    run_report(ReportOptions([target], out=target), warn=warn)
    empty = [empty_report_reason(e) for e in found.summaries if e.n_S == 0]
    return RunReport(target, target / REPORT_FILE, empty)


def empty_report_reason(summary: ExperimentSummary) -> str:
    """Why an experiment with n_S = 0 has an empty report, in one line. The embedded SmolLM2 on
    MuSiQue is the known case (splice/README.md): it never closes its thinking there, so no arm is
    forked, and the demo's other task fills the report; for any other model or task the records
    alone say which arms are missing."""
    reason = "no problem has both the confidence and the doubt arm completed"
    if summary.model == SMOLLM2 and summary.task == "musique":
        return (
            f"{summary.model} / {summary.task}: n_S = 0: {reason} (on MuSiQue SmolLM2 never "
            "closes its thinking, so no arm is forked); the report shows the empty shape. "
            "`nudge run --task strategyqa` fills it."
        )
    return f"{summary.model} / {summary.task}: n_S = 0: {reason}; the report shows the empty shape."


def write_html(
    out: str | Path,
    summaries: Sequence[ExperimentSummary],
    values: Sequence[DelegationValueSummary],
    grounding: Sequence[GroundingSummary],
    run_dirs: Sequence[str | Path],
    figures: Sequence[Path],
    positions: Sequence[PositionSummary] = (),
    openers: Sequence[ExperimentOpeners] = (),
    samples: Sequence[ExperimentSamples] = (),
) -> list[Path]:
    """report.html (html/page.py): every table (the Markdown `nudge stats` writes), every PNG
    figure just drawn, and the browser over the run directories that can still be read."""
    files = stats_files(summaries, run_dirs, values, grounding, positions, openers, samples)
    tables = {name: text for name, text in files.items() if name.endswith(".md")}
    tables = {name: tables[name] for name in sorted(tables, key=_table_order)}
    page = render_page(
        tables, [f for f in figures if f.suffix == ".png"], browser_data(dict.fromkeys(run_dirs))
    )
    return atomic_write_files({Path(out) / REPORT_FILE: page.encode("utf-8")})


def _table_order(name: str) -> tuple[int, str]:
    """table1, table4, ..., table9, then the rest (the overview table.md last: it repeats them)."""
    if name.startswith("table") and name[5:6].isdigit():
        return (0, name)
    return (2, name) if name == "table.md" else (1, name)
