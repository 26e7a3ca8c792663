"""The run manifest: what a run was, so that anyone can audit or repeat it.

`manifest.json` holds the experiment label that `nudgeability.stats` reads (`experiment`: model,
task, decoding, seeds), the full resolved config, the family, the seeds, the drawn problem ids,
a sha256 of every input file (each checkpoint file, the GGUF of the embedded model, the data file
and the sentences file), the package versions and the git commit of the nudgeability checkout
(null when it is not one). It carries no clock and no host name, so the same config on the same
machine gives the same bytes, and shards of one run differ only in `config.shard`.

A finished run's manifest is rewritten once more, last and atomically, with a `seal`: the sha256
and line count of `records.jsonl` (and `resolutions.jsonl`), the sha256 of every part file and of
every side file in `signals/`, so that `nudge verify` can prove the files are the ones the run
wrote. A seal written before side files were sealed has no `signals` key. A manifest without a seal is an unfinished run, or
one made before sealing existed; the seal is neither identity nor provenance (it is a result).
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import json
import platform
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nudgeability.splice.rundir.layout import MANIFEST
from nudgeability.util.atomic import atomic_write_text
from nudgeability.util.cache import cache_root
from nudgeability.util.json_errors import json_error

if TYPE_CHECKING:
    from nudgeability.models.loader import ModelSource

MANIFEST_FORMAT = 1


class OutputDirError(ValueError):
    """An output directory that cannot be used; the message names it and says what to do."""


# what decides the records: a resumed run or a merged shard must match these exactly
IDENTITY_KEYS = ("format", "experiment", "config", "family", "seeds", "problems", "inputs")
# where the code came from, the server URL of a remote run, and the torch CPU thread count (set by
# --threads): a difference is reported, not refused (a commit may change nothing; a server may move)
PROVENANCE_KEYS = ("versions", "git_commit", "endpoint", "threads")
# what a finished run wrote (splice/rundir/seal.py): checked by `nudge verify`, never compared
# between two manifests
SEAL_KEY = "seal"
# every fallback from a fast path the run took (`nudgeability.util.fallbacks.taken()`, as dicts),
# written with the seal: a fact about the device and libraries of the process that finished the
# run, never compared (a resume on other hardware may meet others), like the seal
FALLBACKS_KEY = "fallbacks"
# where the inputs were found: not compared, their sha256 (under the same "inputs" keys) decide. A resume with another NUDGE_CACHE, or a checkpoint or data file moved or
# copied elsewhere, reuses the stored records when every hash is the same.
LOCATION_KEYS = (
    ("config", "model"),
    ("config", "data"),
    ("config", "sentences"),
    ("inputs", "data", "path"),
    ("inputs", "sentences", "path"),
    ("inputs", "checkpoint", "directory"),
    ("inputs", "checkpoint", "gguf", "path"),
    ("inputs", "tokenizer", "directory"),  # a run on a server: its tokenizer's directory
)
# distribution names whose versions can change the records
VERSIONED = (
    "torch",
    "transformers",
    "numpy",
    "numba",
    "tokenizers",
    "bitsandbytes",
    "compressed-tensors",
    "nudgeability",
)


CACHED_HASH_MIN_BYTES = 64 << 20  # files this large have their hash remembered


def sha256_file(path: str | Path, block: int = 1 << 23, *, cached: bool = True) -> str:
    """Hex sha256 of a file's bytes, read in blocks (checkpoints can be many GB).

    The hash of a large file is remembered in the nudgeability cache, keyed by its real path,
    size and modification time, so that resuming or sharding a campaign over a multi-GB
    checkpoint does not re-read it each time. A changed file has a new key and is hashed again.
    `cached=False` always reads the bytes (an audit must not trust a remembered hash).
    """
    path = Path(path)
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    large = cached and stat.st_size >= CACHED_HASH_MIN_BYTES
    cache = _hash_cache_file() if large else None
    known = _read_hash_cache(cache)
    if key in known:
        return known[key]
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(block):
            digest.update(chunk)
    value = digest.hexdigest()
    if cache is not None:
        known[key] = value
        try:  # best effort: another process may write at the same time; a lost entry is recomputed
            cache.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(cache, json.dumps(known, sort_keys=True))
        except OSError:
            pass
    return value


def _hash_cache_file() -> Path:
    return cache_root() / "sha256.json"


def _read_hash_cache(cache: Path | None) -> dict:
    if cache is None or not cache.is_file():
        return {}
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}


def package_versions() -> dict[str, str | None]:
    """Python's and each package's installed version (None when not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit() -> str | None:
    """HEAD of the git checkout nudgeability runs from, or None (an installed wheel, no git)."""
    package_root = Path(__file__).resolve().parents[2]  # the repository root in a checkout
    try:
        top = subprocess.run(
            ["git", "-C", str(package_root), "rev-parse", "--show-toplevel", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    # only our own checkout counts, not some repository the package happens to be installed inside
    if len(top) != 2 or Path(top[0]).resolve() != package_root:
        return None
    return top[1]


def compare_manifests(
    old: dict, new: dict, labels: tuple[str, str] = ("stored", "now")
) -> tuple[list[str], list[str]]:
    """(identity differences, provenance differences) between two manifests, one line per key.

    Identity keys (config, input hashes, problems, ...) decide the records; provenance keys
    (versions, git commit) say which code ran. `LOCATION_KEYS` (where the inputs were found) are
    not compared: the inputs' sha256 are, so a moved or re-cached file is no difference. Keys
    outside these lists count as identity.
    """

    def split(manifest: dict) -> tuple[dict, dict]:
        unread = (SEAL_KEY, FALLBACKS_KEY)
        identity = {k: v for k, v in manifest.items() if k not in PROVENANCE_KEYS + unread}
        provenance = {k: v for k, v in manifest.items() if k in PROVENANCE_KEYS}
        identity = copy.deepcopy(identity)
        for path in LOCATION_KEYS:
            _pop_path(identity, path)
        return identity, provenance

    old_identity, old_provenance = split(old)
    new_identity, new_provenance = split(new)
    return (
        diff_configs(old_identity, new_identity, labels),
        diff_configs(old_provenance, new_provenance, labels),
    )


def diff_configs(
    old: object, new: object, labels: tuple[str, str] = ("stored", "now"), prefix: str = ""
) -> list[str]:
    """One line per key whose value differs between two JSON values (nested dicts are walked).

    Lines read `key: stored X, now Y` (with `labels` naming the two sides), sorted by key.
    """
    if isinstance(old, dict) and isinstance(new, dict):
        lines = []
        for key in sorted(set(old) | set(new)):
            name = f"{prefix}{key}"
            if key not in old:
                lines.append(f"{name}: {labels[0]} nothing, {labels[1]} {_short(new[key])}")
            elif key not in new:
                lines.append(f"{name}: {labels[0]} {_short(old[key])}, {labels[1]} nothing")
            else:
                lines.extend(diff_configs(old[key], new[key], labels, f"{name}."))
        return lines
    if old != new:
        return [f"{prefix.rstrip('.')}: {labels[0]} {_short(old)}, {labels[1]} {_short(new)}"]
    return []


def _short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _pop_path(data: dict, path: tuple[str, ...]):
    """Remove and return the value at `path` in nested dicts (None when absent)."""
    for key in path[:-1]:
        data = data.get(key) if isinstance(data, dict) else None
    return data.pop(path[-1], None) if isinstance(data, dict) else None


def checkpoint_inputs(source: ModelSource) -> dict:
    """The checkpoint's directory, the sha256 of each of its files and, if any, of its GGUF; for
    a quantised checkpoint, the compute mode and the kernel path of each format
    (`quant_compute`: an identity key, so a replay on a machine whose kernels differ is refused)."""
    inputs = {
        "directory": str(source.directory),
        "files": {Path(path).name: sha256_file(path) for path in source.files},
        "gguf": None
        if source.gguf is None
        else {"path": str(source.gguf), "sha256": sha256_file(source.gguf)},
        "quant_method": source.quant_method,
    }
    if source.quant_compute is not None:
        inputs["quant_compute"] = source.quant_compute
    return inputs


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


def build_manifest(
    config: ResolvedConfig,
    problem_ids: list[str],
    source: ModelSource,
    sentences_sha256: str,
    threads: int | None = None,
) -> dict:
    """The manifest of a run (see the module docstring); `threads` is torch's CPU thread count
    the run computes with (provenance: which share of the machine ran it)."""
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
    return manifest


def manifest_text(manifest: dict) -> str:
    """The byte-exact form of a manifest: indented JSON with sorted keys."""
    return json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False)


def read_manifest(directory: Path) -> dict:
    """The manifest of a run directory; OutputDirError naming the file if it is missing or broken."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise OutputDirError(
            f"{path}: missing; {directory} is not a run directory written by `nudge run`"
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise OutputDirError(f"{path}:{exc.lineno}: {json_error(exc)}") from None
