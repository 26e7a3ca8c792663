"""The audit's hash checks: a run's inputs and its sealed files (see verify.py for the others).

    check_inputs(run)     the checkpoint, data and sentences files against the manifest's sha256
    check_integrity(run)  records.jsonl and every part file against the manifest's seal

Every hash is computed from the file's bytes, never taken from the hash cache, and nothing is
written into the run directory.
"""

from __future__ import annotations

from pathlib import Path

from nudgeability.splice.manifest import (
    SEAL_KEY,
    compare_manifests,
    git_commit,
    package_versions,
    sha256_file,
)
from nudgeability.splice.verify import FAIL, OK, UNSEALED, Check, StoredRun, summary
from nudgeability.splice.work_store import MANIFEST, PARTS, RECORDS, RESOLUTIONS


# ----- inputs --------------------------------------------------------------------------------------
def check_inputs(
    run: StoredRun, model: str | None = None, data: str | None = None, sentences: str | None = None
) -> Check:
    """Re-hash the checkpoint, data and sentences files (from the bytes, never a cached hash)
    and compare them with the manifest; `model`, `data`, `sentences` give moved files again.
    Package versions and the git commit that differ are warnings."""
    from nudgeability.models.loader import resolve

    inputs = run.manifest.get("inputs", {})
    problems = []
    for name, override in (("data", data), ("sentences", sentences)):
        stored = inputs.get(name, {})
        path = override or stored.get("path")
        problems.extend(_compare_file(f"{name} file", path, stored, f"--{name}"))
    stored = inputs.get("checkpoint", {})
    spec = model or run.manifest["config"]["model"]
    try:
        source = resolve(spec)
    except (ValueError, OSError) as exc:
        problems.append(f"checkpoint {spec}: cannot be found here ({exc}); pass it with --model")
        source = None
    if source is not None:
        files = {path.name: path for path in source.files}
        stored_files = stored.get("files", {})
        for name in sorted(set(files) | set(stored_files)):
            if name not in files:
                problems.append(f"checkpoint file {source.directory / name}: missing")
            elif name not in stored_files:
                problems.append(f"checkpoint file {files[name]}: not in the manifest")
            else:
                problems.extend(
                    _compare_file("checkpoint file", files[name], {"sha256": stored_files[name]})
                )
        gguf = stored.get("gguf")
        if (gguf is None) != (source.gguf is None):
            problems.append(f"checkpoint {spec}: GGUF {source.gguf}, the manifest says {gguf}")
        elif gguf is not None:
            problems.extend(_compare_file("checkpoint GGUF", source.gguf, gguf, "--model"))
    now = {"versions": package_versions(), "git_commit": git_commit()}
    _, changed = compare_manifests(
        {k: run.manifest.get(k) for k in now}, now, ("the run had", "this checkout has")
    )
    if problems:
        return Check("inputs", FAIL, summary(problems, "input problems"), tuple(changed))
    count = len(stored.get("files", {})) + (stored.get("gguf") is not None)
    detail = (
        f"checkpoint ({count} files), data and sentences files re-hashed: equal to the manifest"
    )
    return Check("inputs", OK, detail, tuple(changed))


def _compare_file(what: str, path: str | Path | None, stored: dict, flag: str = "") -> list[str]:
    """[] when the file's bytes hash to `stored["sha256"]`; else the one-line problem (a missing
    input names the `flag` that gives its new place)."""
    if path is None or not Path(path).is_file():
        hint = f"; if it moved, pass its new place with {flag}" if flag else ""
        return [f"{what} {path}: missing{hint}"]
    digest = sha256_file(path, cached=False)
    if digest != stored.get("sha256"):
        return [
            f"{what} {path}: sha256 {digest[:12]}…, the manifest recorded "
            f"{str(stored.get('sha256'))[:12]}… (the file changed)"
        ]
    return []


# ----- integrity --------------------------------------------------------------------------------
def check_integrity(run: StoredRun) -> Check:
    """records.jsonl and every part file against the sha256 sealed in the manifest."""
    seal = run.manifest.get(SEAL_KEY)
    if seal is None:
        return Check(
            "integrity",
            UNSEALED,
            f"{run.root / MANIFEST} holds no seal (a run made before sealing existed, or one "
            "that never finished): the records cannot be checked against hashes",
        )
    problems = []
    records = run.root / RECORDS
    stored_records = seal.get("records", {})
    problems += _compare_file("records file", records, stored_records) if records.is_file() else []
    if not records.is_file():
        problems.append(f"{records}: missing, though the manifest is sealed")
    resolutions = run.root / RESOLUTIONS  # a run made with --resolve
    if "resolutions" in seal or resolutions.is_file():
        problems += _compare_file("resolutions file", resolutions, seal.get("resolutions", {}))
    sealed_parts = seal.get("parts", {})
    present = {path.name: path for path in (run.root / PARTS).glob("*.jsonl")}
    for name in sorted(set(sealed_parts) | set(present)):
        if name not in present:
            problems.append(f"{run.root / PARTS / name}: missing, though the seal lists it")
        elif name not in sealed_parts:
            problems.append(f"{present[name]}: not in the manifest's seal")
        else:
            problems += _compare_file("part file", present[name], {"sha256": sealed_parts[name]})
    if problems:
        return Check("integrity", FAIL, summary(problems, "integrity problems"))
    return Check(
        "integrity",
        OK,
        f"records.jsonl and {len(sealed_parts)} part files match the sha256 sealed in the manifest",
    )
