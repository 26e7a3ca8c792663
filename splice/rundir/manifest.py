"""The run manifest: what a run was, so that anyone can audit or repeat it; its schema, its one
writer (`build_manifest`, `remote_manifest`, `manifest_text`) and its one reader (`read_manifest`).

`manifest.json` holds the experiment label that `nudgeability.stats` reads (`experiment`: model,
task, decoding, seeds), the full resolved config, the family, the seeds, the drawn problem ids,
a sha256 of every input file (each checkpoint file, the GGUF of the embedded model, the data file
and the sentences file), the package versions and the git commit of the nudgeability checkout
(null when it is not one), what the run showed the model (`shown`: each drawn problem's
question and gold, each arm's inserted sentence) for the report, and, for a run on the in-process
engine, the length of each base's shared start (`shared_start`, splice/experiment/shared_start.py),
which decides the path the engine computes the prompts on. A run with `--interventions FILE`
also records the file (`inputs.interventions`: path and sha256) and its definitions as data
(`interventions`), from which every reader makes the run's conditions (`Manifest.condition_set`)
without running the file. It carries no clock and no host
name, so the same config on the same machine gives the same bytes, and shards of one run differ
only in `config.shard`.

A finished run's manifest is rewritten once more, last and atomically, with a `seal`: the sha256
and line count of `records.jsonl` (and `resolutions.jsonl`), the sha256 of every part file and of
every side file in `signals/`, so that `nudge verify` can prove the files are the ones the run
wrote. A seal written before side files were sealed has no `signals` key. A manifest without a seal is an unfinished run, or
one made before sealing existed; the seal is neither identity nor provenance (it is a result).

Which keys decide what, and the comparison of two manifests (`identity`, `experiment_settings`,
`compare_manifests`), are stated once in manifest_keys.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nudgeability.splice.experiment.conditions import ConditionSet
from nudgeability.splice.experiment.intervention_file import (
    InterventionFileError,
    from_definitions,
)
from nudgeability.splice.rundir.layout import MANIFEST
from nudgeability.splice.rundir.manifest_keys import SEAL_KEY, SHARED_START_KEY, SHOWN_KEY
from nudgeability.splice.rundir.provenance import (
    checkpoint_inputs,
    git_commit,
    package_versions,
    sha256_file,
)
from nudgeability.util.json_errors import json_error

if TYPE_CHECKING:
    from nudgeability.models.loader import ModelSource

MANIFEST_FORMAT = 1


class OutputDirError(ValueError):
    """An output directory that cannot be used; the message names it and says what to do."""


# ---------------------------------------------------------------- the writer
class ResolvedConfig(Protocol):
    """What the manifest reads of a resolved run config: splice/run/config.py `RunConfig`, whose
    layer (the runner) sits above this one, so only its shape is named here."""

    family: str | None
    seeds: tuple[int, ...] | None
    data: str | None
    sentences: str | None

    @property
    def experiment(self) -> dict: ...

    def to_dict(self) -> dict: ...


USER_INTERVENTIONS_KEY = "interventions"  # a user's interventions, as data (identity)


@dataclass(frozen=True)
class UserInterventions:
    """A run's interventions file: where it was, its sha256, and what it defined
    (splice/experiment/interventions.py `Condition.to_dict`, one per intervention)."""

    path: str
    sha256: str
    definitions: list[dict]

    @classmethod
    def of_manifest(cls, data: Mapping) -> UserInterventions | None:
        """What a manifest recorded of the run's interventions file; None for a run without one
        (or a manifest too malformed to say, which its other readers name)."""
        found = data.get(USER_INTERVENTIONS_KEY)
        stored = _object(_object(data.get("inputs")).get("interventions"))
        if not isinstance(found, list) or not isinstance(stored.get("sha256"), str):
            return None
        return cls(str(stored.get("path")), stored["sha256"], found)

    @classmethod
    def in_directory(cls, directory: str | Path) -> UserInterventions | None:
        """`of_manifest` of the run directory a resume continues; None where it holds no
        readable manifest (the run's store says what is wrong with one)."""
        try:
            return cls.of_manifest(read_manifest(directory).data)
        except (OutputDirError, OSError):
            return None


def manifest_conditions(
    data: Mapping, where: str | Path = MANIFEST, error: Callable[[str], Exception] = OutputDirError
) -> ConditionSet:
    """The conditions a manifest's run knows: the shipped ones and the user's it records as data
    (`interventions`); `error` naming the field when they are malformed. Runs no file."""
    try:
        return from_definitions(data.get(USER_INTERVENTIONS_KEY), where)
    except (TypeError, InterventionFileError) as exc:
        raise error(f"{where}: field {USER_INTERVENTIONS_KEY}: {exc}") from None


def build_manifest(
    config: ResolvedConfig,
    problem_ids: list[str],
    source: ModelSource,
    sentences_sha256: str,
    threads: int | None = None,
    shown: Shown | None = None,
    shared_start: dict[str, int] | None = None,
    interventions: UserInterventions | None = None,
) -> dict:
    """The manifest of a run (see the module docstring); `threads` is torch's CPU thread count
    the run computes with (provenance: which share of the machine ran it); `shared_start` each
    base's start length (None on a server, which ignores it: no key)."""
    manifest = {
        "format": MANIFEST_FORMAT,
        "experiment": config.experiment,
        "config": config.to_dict(),
        "family": config.family,
        "seeds": list(config.seeds),
        "problems": list(problem_ids),
        "inputs": {
            "data": {"path": config.data, "sha256": sha256_file(config.data)},
            "sentences": {"path": config.sentences, "sha256": sentences_sha256},
            "checkpoint": checkpoint_inputs(source),
        },
        "versions": package_versions(),
        "git_commit": git_commit(),
    }
    if threads is not None:
        manifest["threads"] = threads
    if shown is not None:
        manifest[SHOWN_KEY] = shown.to_dict()
    if shared_start is not None:
        manifest[SHARED_START_KEY] = dict(shared_start)
    if interventions is not None:
        manifest["inputs"]["interventions"] = {
            "path": interventions.path,
            "sha256": interventions.sha256,
        }
        manifest[USER_INTERVENTIONS_KEY] = list(interventions.definitions)
    return manifest


def remote_manifest(
    manifest: dict, described: dict, continuation: str, tokenizer_directory, tokenizer_files
) -> dict:
    """`manifest` with what a run on a server adds: the backend it `described` (its base URL
    becomes the `endpoint`), its continuation level when not token-exact, and its tokenizer's
    files in place of the checkpoint's (splice/run/remote.py)."""
    described = dict(described)
    endpoint = {"base_url": described.pop("base_url")}
    inputs = dict(manifest["inputs"])
    inputs.pop("checkpoint", None)
    inputs["tokenizer"] = {
        "directory": str(tokenizer_directory),
        "files": {Path(p).name: sha256_file(p) for p in tokenizer_files},
    }
    experiment = dict(manifest["experiment"])
    if continuation != "token":
        experiment["continuation"] = continuation
    return {
        **manifest,
        "experiment": experiment,
        "inputs": inputs,
        "backend": described,
        "endpoint": endpoint,
    }


def manifest_text(manifest: Mapping) -> str:
    """The byte-exact form of a manifest: indented JSON with sorted keys."""
    return json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False)


# ---------------------------------------------------------------- the typed manifest and its reader
@dataclass(frozen=True)
class Experiment:
    """The experiment a manifest declares: what the stats name a row by."""

    model: str
    task: str
    decoding: str
    seeds: tuple[int, ...]
    continuation: str  # CONTINUATION_LEVELS (records.py); "token" when the manifest omits it


@dataclass(frozen=True)
class ShownProblem:
    question: str
    gold: object  # as the task holds it: a list of gold strings (MuSiQue), a bool (StrategyQA)


@dataclass(frozen=True)
class Shown:
    """What a run showed the model, for the report: each drawn problem's question and gold (by
    id), each arm's inserted sentence (by condition code; the empty splice has none)."""

    problems: dict[str, ShownProblem]
    sentences: dict[str, str]

    def to_dict(self) -> dict:
        return {
            "problems": {
                pid: {"question": p.question, "gold": _json(p.gold)}
                for pid, p in self.problems.items()
            },
            "sentences": dict(self.sentences),
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> Shown:
        problems = data.get("problems") or {}
        return cls(
            {
                pid: ShownProblem(p.get("question", ""), p.get("gold"))
                for pid, p in problems.items()
            },
            dict(data.get("sentences") or {}),
        )


def _json(gold: object) -> object:
    return list(gold) if isinstance(gold, tuple) else gold  # the manifest's JSON, also in memory


def _object(value: object) -> dict:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Manifest:
    """A run directory's manifest as read (`read_manifest`): its parts by name, and `data`, the
    stored JSON object, for the writers and `compare_manifests`. A part a hand-written or older
    manifest lacks reads as empty (None for the scalars)."""

    path: Path  # where it was read from (error messages)
    data: dict
    config: dict
    family: str | None
    problems: tuple[str, ...]
    inputs: dict
    git_commit: str | None
    backend: dict | None  # a run on a server (backends/http_backend.py `describe`)
    endpoint: dict | None
    seal: dict | None
    shown: Shown | None  # None in a run made before the key existed

    @classmethod
    def from_dict(cls, data: dict, path: str | Path = MANIFEST) -> Manifest:
        backend, endpoint, seal, shown = (
            data.get(k) for k in ("backend", "endpoint", SEAL_KEY, SHOWN_KEY)
        )
        return cls(
            path=Path(path),
            data=data,
            config=_object(data.get("config")),
            family=data.get("family"),
            problems=tuple(data.get("problems") or ()),
            inputs=_object(data.get("inputs")),
            git_commit=data.get("git_commit"),
            backend=backend if isinstance(backend, dict) else None,
            endpoint=endpoint if isinstance(endpoint, dict) else None,
            seal=seal if isinstance(seal, dict) else None,
            shown=Shown.from_dict(shown) if isinstance(shown, dict) else None,
        )

    def experiment(self, error: Callable[[str], Exception] = OutputDirError) -> Experiment:
        """The declared experiment, checked; `error` names the file and the field otherwise."""
        found = self.data.get("experiment")
        if not isinstance(found, dict):
            raise error(
                f"{self.path}: missing the object 'experiment' (model, task, decoding, seeds)"
            )
        for key in ("model", "task", "decoding"):
            if not isinstance(found.get(key), str):
                raise error(f"{self.path}: field experiment.{key} is missing or not a string")
        seeds = found.get("seeds", [0])
        if not (isinstance(seeds, list) and all(isinstance(x, int) for x in seeds)):
            raise error(f"{self.path}: field experiment.seeds must be a list of integers")
        continuation = found.get("continuation", "token")
        if not isinstance(continuation, str):
            raise error(f"{self.path}: field experiment.continuation must be a string")
        return Experiment(
            found["model"], found["task"], found["decoding"], tuple(seeds), continuation
        )

    def condition_set(self, error: Callable[[str], Exception] = OutputDirError) -> ConditionSet:
        """The conditions the run knows: the shipped ones and its own (`manifest_conditions`)."""
        return manifest_conditions(self.data, self.path, error)

    def conditions(self, error: Callable[[str], Exception] = OutputDirError) -> tuple[str, ...]:
        """The condition codes the config asked for (empty when it does not say)."""
        asked = self.config.get("conditions") or ()
        if not (isinstance(asked, (list, tuple)) and all(isinstance(c, str) for c in asked)):
            raise error(f"{self.path}: field config.conditions must be a list of condition codes")
        return tuple(asked)


def read_manifest(
    directory: str | Path, error: Callable[[str], Exception] = OutputDirError
) -> Manifest:
    """The manifest of a run directory; `error` (OutputDirError unless the caller names its own)
    naming the file if it is missing or broken."""
    directory = Path(directory)
    path = directory / MANIFEST
    if not directory.is_dir():
        raise error(f"{directory}: not a directory (expected a run directory with {MANIFEST})")
    if not path.is_file():
        raise error(f"{path}: missing; {directory} is not a run directory written by `nudge run`")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise error(f"{path}:{exc.lineno}: {json_error(exc)}") from None
    if not isinstance(data, dict):
        raise error(f"{path}: not a JSON object")
    return Manifest.from_dict(data, path)
