"""The data of report.html: the run's provenance and, per experiment, every problem's records.

`browser_data(run_dirs)` reads each run directory's manifest and records.jsonl once and returns
plain JSON data for the problem browser (browser.js):

    provenance   one entry per run directory: its experiment, cohort, the config that defines it,
                 the commit, the sha256 of its inputs, its backend and endpoint (no key)
    experiments  [{name, task, conditions: [code...], labels: {code: short name},
                   parents: {code: base code}, sentences: {code: text}, rows: [row...]}]

A row is one (problem, seed): [id, seed, question, gold, s, NT answer, B, arms], B being
[action kind, action summary, reasoning up to the cut, the rest of B's text, grade] and arms
{code: [kind, summary, continuation text, grade]}, where grade is 1 right, 0 wrong, null not
graded. The question and gold come from the task's data file named by the manifest (the shipped
sample when it names none); a problem missing from it shows its id only. The cut is where B's
text first shows its family's think-close marker (models/families: the arms forked there).

This is the one place the stats package reads the task data (nudgeability.splice.tasks) and
the family's think-close marker (nudgeability.models.families.detect): the browser shows what
the estimators only count.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from nudgeability.models.families.detect import FAMILIES
from nudgeability.splice.experiment.conditions import CONDITIONS, REPORT_ORDER
from nudgeability.splice.experiment.sentences import load_sentences
from nudgeability.splice.rundir.layout import MANIFEST, RECORDS
from nudgeability.splice.tasks import get_task

from ...records.cohorts import cohort_of
from ...records.reading import iter_records
from ...records.run_dirs import read_run_dir

_CONDITION = {c.code: c for c in CONDITIONS}
_PROVENANCE_CONFIG = (
    "model",
    "task",
    "n",
    "sample_seed",
    "decoding",
    "temperature",
    "top_p",
    "seeds",
    "dtype",
    "family",
    "max_new_tokens",
    "max_new_tokens_arm",
    "conditions",
    "data",
    "sentences",
)


def provenance(path: Path, manifest: dict) -> dict:
    """What the page shows of one run directory's manifest (module docstring)."""
    config = manifest.get("config") or {}
    inputs = manifest.get("inputs") or {}
    checkpoint = inputs.get("checkpoint") or {}
    digests = {name: (inputs.get(name) or {}).get("sha256") for name in ("data", "sentences")}
    digests |= {f"checkpoint/{f}": d for f, d in sorted((checkpoint.get("files") or {}).items())}
    if isinstance(checkpoint.get("gguf"), dict):
        digests["checkpoint gguf"] = checkpoint["gguf"].get("sha256")
    return {
        "run_dir": str(path),
        "experiment": manifest.get("experiment", {}),
        "cohort": cohort_of(manifest),
        "config": {k: config[k] for k in _PROVENANCE_CONFIG if k in config},
        "git_commit": manifest.get("git_commit"),
        "family": manifest.get("family"),
        "inputs": {k: v for k, v in digests.items() if v},
        "backend": manifest.get("backend"),
        "endpoint": manifest.get("endpoint"),
    }


def _summary(action: dict) -> str:
    """An action in one line: the answer, or the tool call with its arguments, or the reason."""
    kind = action.get("kind")
    if kind == "SELF":
        return str(action.get("answer") or "")
    if kind == "TOOL":
        arguments = json.dumps(action.get("arguments") or {}, ensure_ascii=False)
        return f"{action.get('tool_name') or '?'}({arguments})"
    return str(action.get("reason") or "")


def _grade(record: dict):
    grade = record.get("grade")
    if not grade or grade.get("correct") is None:
        return None
    return int(bool(grade["correct"]))


def _problems(manifest: dict, task: str) -> dict:
    """{problem id: Problem} of the run's data file; {} when it cannot be read."""
    data = (manifest.get("config") or {}).get("data")
    try:
        return {p.id: p for p in get_task(task).load(data)}
    except (OSError, ValueError):
        return {}


def _sentences(manifest: dict) -> dict[str, str]:
    path = (manifest.get("config") or {}).get("sentences")
    try:
        sentences = load_sentences(path)
    except (OSError, ValueError):
        return {}
    found = {}
    for code, condition in _CONDITION.items():
        inserted = sentences.sentence_for(condition)
        if inserted is not None:
            found[code] = inserted[1]
    return found


def _cut(text: str, marker: str) -> tuple[str, str]:
    at = text.find(marker)
    return (text, "") if at < 0 else (text[:at], text[at:])


def _gold(problem) -> str:
    gold = problem.gold
    if isinstance(gold, bool):
        return "yes" if gold else "no"
    return " | ".join(gold)


def browser_data(run_dirs: Sequence[str | Path]) -> dict:
    """The provenance and the browser's rows of `run_dirs` (module docstring); a directory that
    is not a readable run directory is skipped (the tables still show its experiments)."""
    found_provenance, experiments = [], {}
    for path in map(Path, run_dirs):
        if not (path / MANIFEST).is_file() or not (path / RECORDS).is_file():
            continue
        run = read_run_dir(path)
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        found_provenance.append(provenance(path, manifest))
        label = run.label
        name = " / ".join((label.model, label.task, label.decoding))
        experiment = experiments.setdefault(
            label.key,
            {"name": name, "task": label.task, "records": {}, "manifest": manifest},
        )
        for _, record in iter_records(path / RECORDS):
            if record.get("sample") is None:
                key = (record["problem_id"], record["seed"])
                experiment["records"].setdefault(key, {})[record["condition"]] = record
    return {
        "provenance": found_provenance,
        "experiments": [_experiment(e) for e in experiments.values()],
    }


def _experiment(experiment: dict) -> dict:
    manifest, task = experiment["manifest"], experiment["task"]
    problems = _problems(manifest, task)
    family = FAMILIES.get(manifest.get("family") or "")
    marker = family.think_close_text if family is not None else "</think>"
    present = {c for conditions in experiment["records"].values() for c in conditions}
    arms = [c for c in REPORT_ORDER if c in present and c not in ("NT", "B")]
    rows = []
    for (pid, seed), conditions in experiment["records"].items():
        problem = problems.get(pid)
        nt, base = conditions.get("NT"), conditions.get("B")
        s = -1 if nt is None or _grade(nt) is None else _grade(nt)
        b = None
        if base is not None:
            cut, rest = _cut(base["text"], marker)
            b = [base["action"]["kind"], _summary(base["action"]), cut, rest, _grade(base)]
        rows.append(
            [
                pid,
                seed,
                problem.question if problem else "",
                _gold(problem) if problem else "",
                s,
                "" if nt is None else _summary(nt["action"]),
                b,
                {
                    c: [r["action"]["kind"], _summary(r["action"]), r["text"], _grade(r)]
                    for c in arms
                    if (r := conditions.get(c)) is not None
                },
            ]
        )
    return {
        "name": experiment["name"],
        "task": task,
        "conditions": arms,
        "labels": {c: _CONDITION[c].label for c in arms},
        "parents": {c: _CONDITION[c].parent for c in arms},
        "sentences": _sentences(manifest),
        "rows": rows,
    }
