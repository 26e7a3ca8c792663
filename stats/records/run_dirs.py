"""Run directories as the stats read them: the manifest's experiment, labels, and pooling.

A run directory holds manifest.json (its "experiment": model, task, decoding, seeds; its "config";
the sha256 of its "inputs") beside records.jsonl (file names: splice/rundir/layout.py). Run
directories whose manifests name the same (model, task, decoding) are joined into one experiment
only when their manifests agree on everything that defines it (`defining_settings`: the config
but for its shard, decoding seeds, batching, device and file locations, and the sha256 of the
checkpoint, data and sentences); otherwise RecordsError names the differing keys. A label given
per run directory (`nudge stats --label DIR=NAME`) keeps runs apart: the row's model reads
"model (NAME)".
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from nudgeability.splice.rundir.layout import MANIFEST
from nudgeability.util.json_errors import json_error

from ..table import ExperimentLabel
from .cohorts import cohort_of

# Config keys that may differ between runs pooled into one experiment: how the work was split or
# batched, where it ran, and where the inputs were found (their sha256 are compared instead).
POOLABLE_CONFIG_KEYS = frozenset(
    {"shard", "seeds", "chunk_size", "max_batch_tokens", "device", "model", "data", "sentences"}
)


class RecordsError(ValueError):
    """A run directory or record that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class RunDir:
    """A run directory's location and the experiment its manifest declares."""

    path: Path
    label: ExperimentLabel
    seeds: tuple[int, ...]
    conditions: tuple[
        str, ...
    ] = ()  # the conditions the run asked for (manifest config), if stated
    defining: Mapping[str, object] | None = None  # `defining_settings`; None: an older manifest


def defining_settings(manifest: dict) -> dict[str, object] | None:
    """What must agree for two runs to be one experiment, as flat `key: value` pairs; None for a
    manifest without a config (written by hand or by an older version: nothing to compare)."""
    config = manifest.get("config")
    if not isinstance(config, dict) or set(config) <= {"conditions"}:
        return None
    settings: dict[str, object] = {
        f"config.{k}": v for k, v in config.items() if k not in POOLABLE_CONFIG_KEYS
    }
    inputs = manifest.get("inputs") if isinstance(manifest.get("inputs"), dict) else {}
    for name in ("data", "sentences"):
        if isinstance(inputs.get(name), dict):
            settings[f"inputs.{name}.sha256"] = inputs[name].get("sha256")
    checkpoint = inputs.get("checkpoint") if isinstance(inputs.get("checkpoint"), dict) else {}
    for file, digest in sorted((checkpoint.get("files") or {}).items()):
        settings[f"inputs.checkpoint.files.{file}"] = digest
    if isinstance(checkpoint.get("gguf"), dict):
        settings["inputs.checkpoint.gguf.sha256"] = checkpoint["gguf"].get("sha256")
    return settings


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
    manifest = path / MANIFEST
    if not path.is_dir():
        raise RecordsError(f"{path}: not a directory (expected a run directory with {MANIFEST})")
    if not manifest.is_file():
        raise RecordsError(
            f"{manifest}: missing; is {path} a run directory written by `nudge run`?"
        )
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordsError(f"{manifest}:{exc.lineno}: {json_error(exc)}") from None
    experiment = data.get("experiment") if isinstance(data, dict) else None
    if not isinstance(experiment, dict):
        raise RecordsError(
            f"{manifest}: missing the object 'experiment' (model, task, decoding, seeds)"
        )
    for key in ("model", "task", "decoding"):
        if not isinstance(experiment.get(key), str):
            raise RecordsError(f"{manifest}: field experiment.{key} is missing or not a string")
    seeds = experiment.get("seeds", [0])
    if not (isinstance(seeds, list) and all(isinstance(x, int) for x in seeds)):
        raise RecordsError(f"{manifest}: field experiment.seeds must be a list of integers")
    continuation = experiment.get("continuation", "token")
    if not isinstance(continuation, str):
        raise RecordsError(f"{manifest}: field experiment.continuation must be a string")
    label = ExperimentLabel(
        experiment["model"],
        experiment["task"],
        experiment["decoding"],
        continuation,
        cohort_of(data),
    )
    asked = (data.get("config") or {}).get("conditions") or ()
    if not (isinstance(asked, (list, tuple)) and all(isinstance(c, str) for c in asked)):
        raise RecordsError(f"{manifest}: field config.conditions must be a list of condition codes")
    return RunDir(path, label, tuple(sorted(seeds)), tuple(asked), defining_settings(data))


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
