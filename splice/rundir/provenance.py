"""Where a run's inputs and code came from: the sha256 of its files, the package versions, the
git commit. The manifest (manifest.py) records them; `nudge verify` recomputes them.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from nudgeability.util.atomic import atomic_write_text
from nudgeability.util.cache import cache_root

if TYPE_CHECKING:
    from nudgeability.models.loader import ModelSource

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
