"""Run directories as the stats read them: the manifest's experiment, labels, and pooling.

A run directory holds manifest.json (its "experiment": model, task, decoding, seeds; its "config";
the sha256 of its "inputs") beside records.jsonl; the run format (splice/rundir/manifest.py) reads
it. Run directories whose manifests name the same (model, task, decoding) are joined into one
experiment only when their manifests agree on everything that defines it (the run format's
`experiment_settings`, splice/rundir/manifest_keys.py: what a resume compares, less how the work was split, batched and placed,
and where the inputs were found); otherwise RecordsError names the differing keys. A label given
per run directory (`nudge stats --label DIR=NAME`) keeps runs apart: the row's model reads
"model (NAME)".
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from nudgeability.splice.experiment.conditions import SHIPPED_CONDITIONS, ConditionSet
from nudgeability.splice.rundir.layout import MANIFEST
from nudgeability.splice.rundir.manifest import Manifest, read_manifest
from nudgeability.splice.rundir.manifest_keys import experiment_settings

from ..table import ExperimentLabel
from .cohorts import cohort_of


class RecordsError(ValueError):
    """A run directory or record that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class RunDir:
    """A run directory's location and the experiment its manifest declares."""

    path: Path
    label: ExperimentLabel
    seeds: tuple[int, ...]
    conditions: tuple[str, ...] = ()  # the conditions the run asked for (manifest config)
    defining: Mapping[str, object] | None = None  # `experiment_settings`; None: an older manifest
    manifest: Manifest | None = field(default=None, repr=False, compare=False)
    # the conditions its manifest defines: the shipped ones and the run's own (read as data)
    known: ConditionSet = field(default=SHIPPED_CONDITIONS, repr=False, compare=False)


def _differences(a: Mapping[str, object], b: Mapping[str, object]) -> list[str]:
    def show(value) -> str:
        text = json.dumps(value)
        return text if len(text) <= 40 else text[:37] + "..."

    return [
        f"{key} {show(a.get(key))} vs {show(b.get(key))}"
        for key in sorted(set(a) | set(b))
        if a.get(key) != b.get(key)
    ]


def read_run_dir(path: str | Path) -> RunDir:
    """Read and check a run directory's manifest.json (RecordsError naming the file if bad)."""
    path = Path(path)
    manifest = read_manifest(path, RecordsError)
    experiment = manifest.experiment(RecordsError)
    label = ExperimentLabel(
        experiment.model,
        experiment.task,
        experiment.decoding,
        experiment.continuation,
        cohort_of(manifest),
    )
    return RunDir(
        path,
        label,
        tuple(sorted(experiment.seeds)),
        manifest.conditions(RecordsError),
        experiment_settings(manifest.data),
        manifest,
        manifest.condition_set(RecordsError),
    )


def labelled_run_dirs(
    run_dirs: Sequence[str | Path], labels: Mapping[str | Path, str] | None = None
) -> list[RunDir]:
    """The run directories read (read_run_dir), each named in `labels` renamed "model (name)" so
    that it stays an experiment of its own. RecordsError for no directory or an unknown label."""
    if not run_dirs:
        raise RecordsError("no run directory given")
    named = {Path(d).resolve(): name for d, name in (labels or {}).items()}
    unknown = set(named) - {Path(d).resolve() for d in run_dirs}
    if unknown:
        raise RecordsError(f"--label {sorted(unknown)[0]}: not one of the run directories given")
    found = []
    for run_dir in map(read_run_dir, run_dirs):
        name = named.get(run_dir.path.resolve())
        if name is not None:
            run_dir = replace(
                run_dir,
                label=replace(run_dir.label, model=f"{run_dir.label.model} ({name})"),
            )
        found.append(run_dir)
    return found


def check_poolable(reference: RunDir, run_dir: RunDir) -> None:
    """Refuse to join two runs of one (model, task, decoding) made with different settings."""
    if run_dir is reference or reference.defining is None or run_dir.defining is None:
        return
    differences = _differences(reference.defining, run_dir.defining)
    if differences:
        raise RecordsError(
            f"{run_dir.path / MANIFEST}: same experiment name as {reference.path} but "
            f"other settings ({'; '.join(differences)}); pool only runs of one setting, or keep "
            f"them as separate rows: --label {reference.path}=NAME --label {run_dir.path}=NAME"
        )


def check_same_conditions(reference: RunDir, run_dir: RunDir) -> None:
    """Refuse to pool two runs of one experiment that give one condition code two meanings (in
    runs of two experiments each code means what its own run says)."""
    theirs = {c.code: c for c in run_dir.known.user}
    for mine in reference.known.user:
        other = theirs.get(mine.code)
        if other is not None and other != mine:
            raise RecordsError(
                f"{run_dir.path / MANIFEST}: condition {mine.code!r} is defined otherwise than in "
                f"{reference.path / MANIFEST}; keep them as separate rows: "
                f"--label {reference.path}=NAME --label {run_dir.path}=NAME"
            )
