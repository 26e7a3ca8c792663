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
graded. Everything shown comes from the run directory (the run format, splice/rundir/): the
question, the gold and the inserted sentences from what the manifest says the run showed the
model (`shown`), the cut from B's record (`cut`, where its text reaches the think-close the arms
forked at). A run made before those were recorded shows no question or gold, no sentences, and
B's whole text before the cut. The browser shows what the estimators only count.

A run made with `nudge run --cuts` also forked arms at extra cuts (records with `at`); they never
stand in for the paper's arms of a row. Its experiment gets one more key, only then:

    cuts         {row index: [[at, relative position, base code, {code: arm}], ...]}, each
                 problem's extra cuts in order (base B first, then oracle_B), the relative
                 position at / the base's boundary (null without one), each arm as above

which cuts.js (added to the page only then) shows under the paper's arms, side by side per cut.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from nudgeability.models.families.action import Action
from nudgeability.splice.rundir.layout import MANIFEST, RECORDS
from nudgeability.splice.rundir.manifest import Manifest
from nudgeability.splice.rundir.records import Record

from ...records.cohorts import cohort_of
from ...records.reading import iter_records
from ...records.run_dirs import read_run_dir

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


def provenance(path: Path, manifest: Manifest) -> dict:
    """What the page shows of one run directory's manifest (module docstring)."""
    config, inputs = manifest.config, manifest.inputs
    checkpoint = inputs.get("checkpoint") or {}
    digests = {name: (inputs.get(name) or {}).get("sha256") for name in ("data", "sentences")}
    digests |= {f"checkpoint/{f}": d for f, d in sorted((checkpoint.get("files") or {}).items())}
    if isinstance(checkpoint.get("gguf"), dict):
        digests["checkpoint gguf"] = checkpoint["gguf"].get("sha256")
    return {
        "run_dir": str(path),
        "experiment": manifest.data.get("experiment", {}),
        "cohort": cohort_of(manifest),
        "config": {k: config[k] for k in _PROVENANCE_CONFIG if k in config},
        "git_commit": manifest.git_commit,
        "family": manifest.family,
        "inputs": {k: v for k, v in digests.items() if v},
        "backend": manifest.backend,
        "endpoint": manifest.endpoint,
    }


def _summary(action: Action | None) -> str:
    """An action in one line: the answer, or the tool call with its arguments, or the reason."""
    kind = None if action is None else action.kind
    if kind == "SELF":
        return str(action.answer or "")
    if kind == "TOOL":
        arguments = json.dumps(action.arguments or {}, ensure_ascii=False)
        return f"{action.tool_name or '?'}({arguments})"
    return str((action and action.reason) or "")


def _grade(record: Record):
    if record.grade is None or record.grade.correct is None:
        return None
    return int(bool(record.grade.correct))


def _cut(record: Record) -> tuple[str, str]:
    """B's text before and from its cut (the whole text before it when the record has no cut)."""
    at = record.cut
    return (record.text, "") if at is None else (record.text[:at], record.text[at:])


def _gold(gold: object) -> str:
    if isinstance(gold, bool):
        return "yes" if gold else "no"
    return " | ".join(gold or ())


def browser_data(run_dirs: Sequence[str | Path]) -> dict:
    """The provenance and the browser's rows of `run_dirs` (module docstring); a directory that
    is not a readable run directory is skipped (the tables still show its experiments)."""
    found_provenance, experiments = [], {}
    for path in map(Path, run_dirs):
        if not (path / MANIFEST).is_file() or not (path / RECORDS).is_file():
            continue
        run = read_run_dir(path)
        manifest = run.manifest
        found_provenance.append(provenance(path, manifest))
        label = run.label
        name = " / ".join((label.model, label.task, label.decoding))
        experiment = experiments.setdefault(
            label.key,
            {
                "name": name,
                "task": label.task,
                "records": {},
                "manifest": manifest,
                "known": run.known,
            },
        )
        for _, record in iter_records(path / RECORDS):
            if record.sample is not None:
                continue
            key = (record.problem_id, record.seed)
            if record.at is not None:  # an arm at an extra cut: its own column of the row
                at_cuts = experiment.setdefault("cuts", {}).setdefault(key, {})
                at_cuts.setdefault(record.at, {})[record.condition] = record
            else:
                experiment["records"].setdefault(key, {})[record.condition] = record
    return {
        "provenance": found_provenance,
        "experiments": [_experiment(e) for e in experiments.values()],
    }


def _experiment(experiment: dict) -> dict:
    manifest, task, known = experiment["manifest"], experiment["task"], experiment["known"]
    shown = manifest.shown
    problems = {} if shown is None else shown.problems
    present = {c for conditions in experiment["records"].values() for c in conditions}
    arms = [c for c in known.report_order if c in present and c not in ("NT", "B")]
    cut_arms = experiment.get("cuts")
    if cut_arms is not None:
        present |= {c for found in cut_arms.values() for here in found.values() for c in here}
        arms = [c for c in known.report_order if c in present and c not in ("NT", "B")]
    rows, cuts = [], {}
    for (pid, seed), conditions in experiment["records"].items():
        if cut_arms is not None and (pid, seed) in cut_arms:
            cuts[len(rows)] = _cuts(cut_arms[(pid, seed)], conditions, arms, known)
        problem = problems.get(pid)
        nt, base = conditions.get("NT"), conditions.get("B")
        s = -1 if nt is None or _grade(nt) is None else _grade(nt)
        b = None
        if base is not None:
            cut, rest = _cut(base)
            b = [base.action.kind, _summary(base.action), cut, rest, _grade(base)]
        rows.append(
            [
                pid,
                seed,
                problem.question if problem else "",
                _gold(problem.gold) if problem else "",
                s,
                "" if nt is None else _summary(nt.action),
                b,
                {c: _arm(r) for c in arms if (r := conditions.get(c)) is not None},
            ]
        )
    return {
        "name": experiment["name"],
        "task": task,
        "conditions": arms,
        "labels": {c: known.get(c).short_name for c in arms},
        "parents": {c: known.get(c).base for c in arms},
        "sentences": {} if shown is None else dict(shown.sentences),
        "rows": rows,
        **({"cuts": cuts} if cut_arms is not None else {}),
    }


def _arm(record: Record) -> list:
    return [record.action.kind, _summary(record.action), record.text, _grade(record)]


def _cuts(found: dict[int, dict[str, Record]], conditions: dict[str, Record], arms, known) -> list:
    """One row's extra cuts (module docstring): per base and cut, its arms in `arms` order."""
    out = []
    for base in ("B", "oracle_B"):
        mine = [c for c in arms if known.get(c).base == base]
        record = conditions.get(base)
        boundary = None if record is None else record.boundary
        for at in sorted(found):
            here = {c: _arm(found[at][c]) for c in mine if c in found[at]}
            if here:
                out.append([at, None if not boundary else at / boundary, base, here])
    return out
