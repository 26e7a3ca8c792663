"""The join from run directories to delegation-value tables: records + resolutions -> ValueTable.

A run made with `nudge run --resolve` holds `resolutions.jsonl` beside `records.jsonl`: one line
per TOOL record, keyed like it by (problem_id, condition, seed), with the executed call and the
graded final answer of the turn after the tool result (schema: splice/experiment/records.py,
ResolutionRecord). Rows and experiments are formed as in records.py (one row per (problem, seed),
run directories with the same (model, task, decoding) joined). The grade of each row's final
answer (`answer_right` of delegation_value.final_outcome):

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

from nudgeability.splice.experiment.conditions import NO_TOOL_BASE
from nudgeability.splice.rundir.layout import RECORDS, RESOLUTIONS

from .action_table import ExperimentLabel
from .actions import NONE, SELF, TOOL, TRUNC, action_code
from .delegation_summary import ValueTable
from .delegation_value import final_outcome
from .records import RecordsError, iter_records, json_lines, labelled_run_dirs

RESOLUTIONS_FILE = RESOLUTIONS


def _grade_code(grade) -> int:
    if grade is None:
        return -2
    correct = grade.get("correct") if isinstance(grade, dict) else None
    return -1 if correct is None else int(bool(correct))


def iter_resolutions(path: Path):
    """(line number, resolution dict) of a resolutions.jsonl, checked for the fields the join needs."""
    for number, record in json_lines(path):
        missing = [
            k
            for k in ("problem_id", "condition", "seed", "tool_name", "executed", "action")
            if k not in record
        ]
        if missing:
            raise RecordsError(f"{path}:{number}: missing field(s) {', '.join(missing)}")
        yield number, record


def _resolved_right(resolution: dict) -> int:
    """The grade code of a resolution's final answer (module docstring)."""
    action = resolution.get("action") or {}
    if not resolution["executed"] or action_code(action.get("kind")) != SELF:
        return 0
    return _grade_code(resolution.get("grade"))


def load_value_tables(
    run_dirs: Sequence[str | Path], labels: Mapping[str | Path, str] | None = None
) -> list[ValueTable]:
    """One ValueTable per experiment whose run directories hold resolutions (first-seen order);
    `labels` keeps run directories apart as `load_experiments` does."""
    groups: dict[tuple, dict] = {}
    for run_dir in labelled_run_dirs(run_dirs, labels):
        resolutions = run_dir.path / RESOLUTIONS_FILE
        if not resolutions.is_file():
            continue
        group = groups.setdefault(
            run_dir.label.key, {"label": run_dir.label, "records": {}, "resolutions": {}}
        )
        for _, record in iter_records(run_dir.path / RECORDS):
            if record.get("sample") is not None:  # self-consistency samples: a signal, no TOOL
                continue
            key = (record["problem_id"], record["condition"], record["seed"])
            group["records"][key] = (record["action"]["kind"], _grade_code(record.get("grade")))
        for number, resolution in iter_resolutions(resolutions):
            key = (resolution["problem_id"], resolution["condition"], resolution["seed"])
            if key in group["resolutions"]:
                raise RecordsError(f"{resolutions}:{number}: a second resolution of {key}")
            if key not in group["records"] or action_code(group["records"][key][0]) != TOOL:
                raise RecordsError(f"{resolutions}:{number}: {key} is not a TOOL record of the run")
            group["resolutions"][key] = resolution
    return [_table(g["label"], g["records"], g["resolutions"]) for g in groups.values()]


def _table(label: ExperimentLabel, records: dict, resolutions: dict) -> ValueTable:
    problems: dict[str, int] = {}
    for problem_id, _, _ in records:
        problems.setdefault(problem_id, len(problems))
    rows = sorted({(p, seed) for p, _, seed in records}, key=lambda k: (problems[k[0]], k[1]))
    row_of = {key: i for i, key in enumerate(rows)}
    conditions = sorted({c for _, c, _ in records})
    n = len(rows)
    actions = {c: np.full(n, NONE, np.int8) for c in conditions}
    answers = {c: np.full(n, -2, np.int64) for c in conditions}
    tools = sorted({r["tool_name"] for r in resolutions.values() if r["executed"]})
    resolved = {t: np.zeros(n, np.int64) for t in tools}
    right = {t: np.zeros(n, np.int64) for t in tools}
    for (problem_id, condition, seed), (kind, grade) in records.items():
        i = row_of[(problem_id, seed)]
        actions[condition][i] = action_code(kind)
        if actions[condition][i] == SELF:
            answers[condition][i] = grade
        elif actions[condition][i] == TOOL:
            found = resolutions.get((problem_id, condition, seed))
            if found is not None:
                answers[condition][i] = _resolved_right(found)
                if found["executed"]:
                    resolved[found["tool_name"]][i] += 1
                    right[found["tool_name"]][i] += answers[condition][i] == 1
    s = np.full(n, -1, np.int8)
    for (problem_id, condition, seed), (kind, grade) in records.items():
        # the competence label, by records.py's rule: NT's grade unless NT was truncated
        if condition == NO_TOOL_BASE and action_code(kind) != TRUNC and grade >= 0:
            s[row_of[(problem_id, seed)]] = grade
    return ValueTable(
        s=s,
        actions=actions,
        final={c: final_outcome(actions[c], answers[c]) for c in conditions},
        tool_resolved=resolved,
        tool_right=right,
        cluster=np.array([problems[p] for p, _ in rows], dtype=np.int64),
        label=label,
    )
