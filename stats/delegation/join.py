"""The join from run directories to delegation-value tables: records + resolutions -> ValueTable.

A run made with `nudge run --resolve` holds `resolutions.jsonl` beside `records.jsonl`: one line
per TOOL record, keyed like it by (problem_id, condition, seed), with the executed call and the
graded final answer of the turn after the tool result (schema: splice/rundir/records.py,
ResolutionRecord). Rows, experiments and the competence label are formed as in
stats/records/join.py (one row per (problem, seed), run directories with the same (model, task,
decoding) joined). The grade of each row's final answer (`answer_right` of value.final_outcome):

- SELF record: its grade (1 right, 0 wrong, -1 ungradeable; -2 when the record has no grade);
- TOOL record: its resolution's answer: 1 / 0 / -1 when the resolution turn answered (SELF),
  0 when it did anything else (a second call, OTHER, TRUNC) or the call was not executed, and
  -2 when there is no resolution;
- tool accuracy counts, per tool, the executed resolutions and those whose answer is right.

A directory without resolutions.jsonl gives no table (its TOOL outcomes would all be missing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from nudgeability.splice.experiment.conditions import NO_TOOL_BASE, ConditionSet
from nudgeability.splice.rundir.layout import RECORDS, RESOLUTIONS
from nudgeability.splice.rundir.records import GradeRecord, Record, RecordKey, ResolutionRecord

from ..actions import NONE, SELF, TOOL, action_code
from ..records import (
    RecordsError,
    Rows,
    competence_label,
    iter_records,
    iter_resolutions,
    labelled_run_dirs,
)
from ..records.join import slim
from ..table import ExperimentLabel
from .table import ValueTable
from .value import final_outcome


def _grade_code(grade: GradeRecord | None) -> int:
    if grade is None:
        return -2
    return -1 if grade.correct is None else int(bool(grade.correct))


def _resolved_right(resolution: ResolutionRecord) -> int:
    """The grade code of a resolution's final answer (module docstring)."""
    kind = None if resolution.action is None else resolution.action.kind
    if not resolution.executed or action_code(kind) != SELF:
        return 0
    return _grade_code(resolution.grade)


def load_value_tables(
    run_dirs: Sequence[str | Path], labels: Mapping[str | Path, str] | None = None
) -> list[ValueTable]:
    """One ValueTable per experiment whose run directories hold resolutions (first-seen order);
    `labels` keeps run directories apart as `load_experiments` does."""
    groups: dict[tuple, dict] = {}
    for run_dir in labelled_run_dirs(run_dirs, labels):
        resolutions = run_dir.path / RESOLUTIONS
        if not resolutions.is_file():
            continue
        group = groups.setdefault(
            run_dir.label.key,
            {"label": run_dir.label, "records": {}, "resolutions": {}, "known": run_dir.known},
        )
        for _, record in iter_records(run_dir.path / RECORDS):
            if record.sample is not None:  # self-consistency samples: a signal, no TOOL
                continue
            if record.at is not None:  # arms at extra cuts: the position statistics' alone
                continue
            group["records"][RecordKey.of(record)] = slim(record)
        for number, resolution in iter_resolutions(resolutions):
            key = RecordKey.of(resolution)
            if key in group["resolutions"]:
                raise RecordsError(f"{resolutions}:{number}: a second resolution of {key}")
            record = group["records"].get(key)
            if record is None or action_code(record.action.kind) != TOOL:
                raise RecordsError(f"{resolutions}:{number}: {key} is not a TOOL record of the run")
            group["resolutions"][key] = resolution
    return [_table(g["label"], g["records"], g["resolutions"], g["known"]) for g in groups.values()]


def _table(
    label: ExperimentLabel,
    records: dict[RecordKey, Record],
    resolutions: dict[RecordKey, ResolutionRecord],
    known: ConditionSet,
) -> ValueTable:
    rows = Rows.of((key.problem_id, key.seed) for key in records)
    row_of = rows.index()
    conditions = sorted({key.condition for key in records})
    n = len(rows)
    actions = {c: np.full(n, NONE, np.int8) for c in conditions}
    answers = {c: np.full(n, -2, np.int64) for c in conditions}
    tools = sorted({r.tool_name for r in resolutions.values() if r.executed})
    resolved = {t: np.zeros(n, np.int64) for t in tools}
    right = {t: np.zeros(n, np.int64) for t in tools}
    s = np.full(n, -1, np.int8)
    for key, record in records.items():
        problem_id, condition, seed = key.compact[:3]
        i = row_of[(problem_id, seed)]
        actions[condition][i] = action_code(record.action.kind)
        if condition == NO_TOOL_BASE:
            s[i] = competence_label(record)
        if actions[condition][i] == SELF:
            answers[condition][i] = _grade_code(record.grade)
        elif actions[condition][i] == TOOL:
            found = resolutions.get(key)
            if found is not None:
                answers[condition][i] = _resolved_right(found)
                if found.executed:
                    resolved[found.tool_name][i] += 1
                    right[found.tool_name][i] += answers[condition][i] == 1
    return ValueTable(
        s=s,
        actions=actions,
        final={c: final_outcome(actions[c], answers[c]) for c in conditions},
        tool_resolved=resolved,
        tool_right=right,
        cluster=rows.cluster,
        label=label,
        known=known,
    )
