"""The join from run directories to experiment tables: the one place records become arrays.

Data flows one way: stats reads a run directory as typed records and a typed manifest (the run
format, splice/rundir/; reading.py, run_dirs.py) and never imports the runner. Rules of the join (the delegation and grounding joins follow the same rows and
the same competence label, through `Rows` and `competence_label`):

- one table row per (problem, seed) seen in the records; problems in order of first appearance,
  seeds ascending; the rows of one problem share a cluster;
- s from the NT record: grade.correct True -> 1, False -> 0; None, no grade, a TRUNC action or
  no NT record -> -1 (unknown);
- base from the B record's action; -1 without a B record;
- correct['B'] / correct['oracle_B']: the grade of a SELF answer (1 / 0), else -1;
- every other condition becomes an arm, as does every condition the manifest's config asked for
  (so a run whose B never closed its thinking still has its conf/doubt arrays, all -1); where B
  (or oracle_B for the oracle arms) never closed its thinking (boundary null) the arms are -1, as
  are arms without a record;
- run directories of one (model, task, decoding) are pooled as run_dirs.py says;
- a repeated (problem, condition, seed) is an error;
- self-consistency samples (records with a `sample` index) are signals, not arms.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from nudgeability.splice.experiment.conditions import (
    BASE_CODES,
    NO_TOOL_BASE,
    SHIPPED_CONDITIONS,
    TOOL_BASE,
    ConditionSet,
    UnknownConditionError,
)
from nudgeability.splice.rundir.layout import RECORDS
from nudgeability.splice.rundir.records import Record, RecordKey, least_faithful

from ..actions import NONE, SELF, TRUNC, action_code, competence_code
from ..table import ExperimentLabel, ExperimentTable
from .reading import iter_records
from .run_dirs import (
    RecordsError,
    RunDir,
    check_poolable,
    check_same_conditions,
    labelled_run_dirs,
)


def parent_of(code: str, known: ConditionSet = SHIPPED_CONDITIONS) -> str | None:
    """The base an arm forks from (`known`: the shipped conditions and the runs' own); None for a
    base. A code this version does not know is taken as a fork of B."""
    try:
        return known.get(code).base
    except UnknownConditionError:
        return TOOL_BASE


@dataclass(frozen=True)
class Rows:
    """The rows of one experiment's table: one per (problem, seed), problems in order of first
    appearance, seeds ascending; `cluster` is each row's problem index."""

    keys: tuple[tuple[str, int], ...]  # (problem_id, seed) of each row
    cluster: np.ndarray  # int64 (rows,)

    @classmethod
    def of(cls, seen: Iterable[tuple[str, int]]) -> Rows:
        """The rows of the (problem_id, seed) pairs in the order the records were read."""
        problems: dict[str, int] = {}
        pairs: dict[tuple[str, int], None] = {}
        for problem_id, seed in seen:
            problems.setdefault(problem_id, len(problems))
            pairs[(problem_id, int(seed))] = None
        keys = tuple(sorted(pairs, key=lambda key: (problems[key[0]], key[1])))
        cluster = np.array([problems[p] for p, _ in keys], dtype=np.int64)
        return cls(keys, cluster)

    def __len__(self) -> int:
        return len(self.keys)

    def index(self) -> dict[tuple[str, int], int]:
        """(problem_id, seed) -> row number."""
        return {key: i for i, key in enumerate(self.keys)}


def slim(record: Record) -> Record:
    """The record without its generated ids and text, which the joins never read: a campaign's
    would not fit in memory."""
    return replace(record, generated_ids=[], text="")


def graded(record: Record | None) -> int:
    """1 / 0 for a record whose grade says right / wrong, -1 when absent or ungradeable."""
    if record is None or record.grade is None:
        return -1
    return competence_code(record.grade.correct)


def competence_label(nt: Record | None) -> int:
    """s of a row from its NT record: the grade, unless NT was truncated or has none (-1)."""
    if nt is None or action_code(nt.action.kind) == TRUNC:
        return -1
    return graded(nt)


def _closed(base_record: Record | None) -> bool:
    """False when the base record says its thinking never closed (boundary null): no splice."""
    return base_record is None or base_record.boundary is not None


def table_from_records(
    records: Sequence[Record],
    label: ExperimentLabel,
    conditions: Sequence[str] = (),
    known: ConditionSet = SHIPPED_CONDITIONS,
) -> ExperimentTable:
    """Join the records of one experiment into its ExperimentTable (rules in the module docstring).

    Records must be unique per (problem_id, condition, seed). `conditions` adds arms that were
    asked for even where no record holds them; `known` is what the runs' manifests define (the
    table carries it to every statistic).
    """
    # samples: signals, not arms; arms at extra cuts: the position statistics' (stats/position/)
    arms_of = [r for r in records if r.sample is None and r.at is None]
    rows = Rows.of((r.problem_id, r.seed) for r in arms_of)
    found_at: list[dict[str, Record]] = [{} for _ in rows.keys]
    where = rows.index()
    for record in arms_of:
        found_at[where[(record.problem_id, int(record.seed))]][record.condition] = record
    conditions = sorted(
        ({c for found in found_at for c in found} | set(conditions)) - {NO_TOOL_BASE, TOOL_BASE}
    )
    n = len(rows)
    s, base = np.full(n, -1, np.int8), np.full(n, NONE, np.int8)
    arms = {c: np.full(n, NONE, np.int8) for c in conditions}
    with_grade = [TOOL_BASE] + [code for code in BASE_CODES if code in conditions]
    correct = {name: np.full(n, -1, np.int8) for name in with_grade}
    for i, found in enumerate(found_at):
        s[i] = competence_label(found.get(NO_TOOL_BASE))
        if TOOL_BASE in found:
            base[i] = action_code(found[TOOL_BASE].action.kind)
        for name in with_grade:
            record = found.get(name)
            if record is not None and action_code(record.action.kind) == SELF:
                correct[name][i] = graded(record)
        for c in conditions:
            # A base has no parent; a code this version does not know is taken as a fork of B.
            parent = parent_of(c, known)
            if c in found and (parent is None or _closed(found.get(parent))):
                arms[c][i] = action_code(found[c].action.kind)
    return ExperimentTable(
        s=s,
        base=base,
        arms=arms,
        correct=correct,
        cluster=rows.cluster,
        seed=np.array([seed for _, seed in rows.keys], dtype=np.int64),
        problem_ids=tuple(p for p, _ in rows.keys),
        label=label,
        known=known,
    )


@dataclass
class GatheredExperiment:
    """What the join gathers for one experiment while it reads its run directories: its slim
    records (every one, the arms at extra cuts and the samples included) and what the manifests
    asked for. `table()` is its ExperimentTable; stats/position/ reads the arms at extra cuts."""

    first_label: ExperimentLabel  # the first run directory's label
    first: RunDir  # the run directory every other one must pool with
    asked: set[str]  # the conditions the manifests asked for
    levels: set[str]  # the continuation levels seen
    seen: dict[RecordKey, tuple[str, Record]]  # key -> (where it was read, slim record)
    known: ConditionSet = SHIPPED_CONDITIONS  # what the manifests define (the first run's)

    @property
    def label(self) -> ExperimentLabel:
        """The experiment's label, at the continuation level of its least faithful record."""
        return replace(self.first_label, continuation=least_faithful(self.levels))

    @property
    def records(self) -> list[Record]:
        """The slim records, in the order they were read."""
        return [record for _, record in self.seen.values()]

    @property
    def conditions(self) -> list[str]:
        """The conditions the manifests asked for, sorted."""
        return sorted(self.asked)

    @property
    def has_cuts(self) -> bool:
        """Whether some arm was forked at a cut other than the paper's (`nudge run --cuts`)."""
        return any(key.at is not None for key in self.seen)

    def table(self) -> ExperimentTable:
        return table_from_records(self.records, self.label, self.conditions, self.known)


def gather_experiments(
    run_dirs: Sequence[str | Path], labels: Mapping[str | Path, str] | None = None
) -> list[GatheredExperiment]:
    """The records of each distinct (model, task, decoding) among the run directories, in order
    of first appearance, each run directory checked against the first of its experiment (as
    `load_experiments`, which makes their tables)."""
    experiments: dict[tuple[str, ...], GatheredExperiment] = {}
    for run_dir in labelled_run_dirs(run_dirs, labels):
        key = run_dir.label.key
        if key not in experiments:
            level = run_dir.label.continuation
            experiments[key] = GatheredExperiment(
                run_dir.label, run_dir, set(), {level}, {}, run_dir.known
            )
        experiment = experiments[key]
        check_same_conditions(experiment.first, run_dir)  # before: it names the code
        check_poolable(experiment.first, run_dir)
        experiment.asked.update(run_dir.conditions)
        _read_records(run_dir, experiment)
    return list(experiments.values())


def load_experiments(
    run_dirs: Sequence[str | Path], labels: Mapping[str | Path, str] | None = None
) -> list[ExperimentTable]:
    """One ExperimentTable per distinct (model, task, decoding) among the run directories, in
    order of first appearance. `labels` maps run directories to a name that keeps them as their
    own rows ("model (name)"). Raises RecordsError naming the file and line of any bad record,
    or the differing keys of runs that cannot be pooled."""
    return [experiment.table() for experiment in gather_experiments(run_dirs, labels)]


def _read_records(run_dir: RunDir, experiment: GatheredExperiment) -> None:
    """Add a run directory's records to its experiment, checked against its manifest."""
    label, path = experiment.first_label, run_dir.path / RECORDS
    for number, record in iter_records(path):
        if record.task != label.task:
            raise RecordsError(
                f"{path}:{number}: task {record.task!r} but the manifest says {label.task!r}"
            )
        if record.seed not in run_dir.seeds:
            seeds = list(run_dir.seeds)
            raise RecordsError(
                f"{path}:{number}: seed {record.seed} is not among the manifest's seeds {seeds}"
            )
        key = RecordKey.of(record)
        if key in experiment.seen:
            first_at = experiment.seen[key][0]
            raise RecordsError(f"{path}:{number}: duplicate record {key} (first at {first_at})")
        experiment.seen[key] = (f"{path}:{number}", slim(record))
        # the experiment's level is its least faithful record's (a server that returned no ids
        # for some requests makes a token-mode run text-level)
        experiment.levels.add(record.continuation or "token")
