"""The audit's hash checks: a run's inputs and its sealed files (see verify.py for the others).

    check_inputs(run)     the checkpoint (a remote run: its tokenizer), data and sentences files
                          against the manifest's sha256
    check_weights(run)    a remote run only: says that its weights cannot be checked here
    check_integrity(run)  records.jsonl, every part file and side file against the manifest's seal

Every hash is computed from the file's bytes, never taken from the hash cache, and nothing is
written into the run directory.
"""

from __future__ import annotations

from pathlib import Path

from nudgeability.splice.backend_setup import is_remote, tokenizer_files
from nudgeability.splice.manifest import (
    SEAL_KEY,
    SEALED_SIDE_FILES,
    compare_manifests,
    git_commit,
    package_versions,
    sha256_file,
)
from nudgeability.splice.verify import (
    FAIL,
    NOT_CHECKABLE,
    OK,
    UNSEALED,
    Check,
    StoredRun,
    summary,
)
from nudgeability.splice.work_store import (
    MANIFEST,
    PARTS,
    RECORDS,
    RESOLUTIONS,
    SIGNALS_DIR,
    side_files,
)


# ----- inputs --------------------------------------------------------------------------------------
def check_inputs(
    run: StoredRun,
    model: str | None = None,
    data: str | None = None,
    sentences: str | None = None,
    tokenizer: str | None = None,
) -> Check:
    """Re-hash the checkpoint (a remote run: its tokenizer), data and sentences files (from the
    bytes, never a cached hash) and compare them with the manifest; `model`, `data`,
    `sentences`, `tokenizer` give moved files again. Package versions and the git commit that
    differ are warnings."""
    inputs = run.manifest.get("inputs", {})
    problems = []
    for name, override in (("data", data), ("sentences", sentences)):
        stored = inputs.get(name, {})
        path = override or stored.get("path")
        problems.extend(_compare_file(f"{name} file", path, stored, f"--{name}"))
    if is_remote(run.manifest):
        found, count = _tokenizer_problems(inputs.get("tokenizer", {}), tokenizer)
        what = f"tokenizer ({count} files)"
    else:
        spec = model or run.manifest["config"]["model"]
        found, count = _checkpoint_problems(inputs.get("checkpoint", {}), spec)
        what = f"checkpoint ({count} files)"
    problems += found
    now = {"versions": package_versions(), "git_commit": git_commit()}
    _, changed = compare_manifests(
        {k: run.manifest.get(k) for k in now}, now, ("the run had", "this checkout has")
    )
    if problems:
        return Check("inputs", FAIL, summary(problems, "input problems"), tuple(changed))
    detail = f"{what}, data and sentences files re-hashed: equal to the manifest"
    return Check("inputs", OK, detail, tuple(changed))


def _checkpoint_problems(stored: dict, spec: str) -> tuple[list[str], int]:
    """The checkpoint's files (and GGUF) against the manifest's sha256; (problems, files)."""
    from nudgeability.models.loader import resolve

    count = len(stored.get("files", {})) + (stored.get("gguf") is not None)
    try:
        source = resolve(spec)
    except (ValueError, OSError) as exc:
        return [f"checkpoint {spec}: cannot be found here ({exc}); pass it with --model"], count
    files = {path.name: path for path in source.files}
    problems = _compare_named(
        "checkpoint file", source.directory, stored.get("files", {}), files, "the manifest"
    )
    gguf = stored.get("gguf")
    if (gguf is None) != (source.gguf is None):
        problems.append(f"checkpoint {spec}: GGUF {source.gguf}, the manifest says {gguf}")
    elif gguf is not None:
        problems.extend(_compare_file("checkpoint GGUF", source.gguf, gguf, "--model"))
    return problems, count


def _tokenizer_problems(stored: dict, override: str | None) -> tuple[list[str], int]:
    """A remote run's tokenizer files against the manifest's sha256; (problems, files)."""
    listed = stored.get("files", {})
    directory = Path(override or stored.get("directory") or "")
    if not directory.is_dir():
        hint = "; if it moved, pass its new place with --tokenizer"
        return [f"tokenizer directory {directory}: missing{hint}"], len(listed)
    files = {path.name: path for path in tokenizer_files(directory)}
    return _compare_named("tokenizer file", directory, listed, files, "the manifest"), len(listed)


def check_weights(run: StoredRun) -> Check:
    """What no file here can show for a remote run: the weights and serving stack behind the
    endpoint are the provider's. Reported, never failed (only a replay tests what they compute)."""
    backend, endpoint = run.manifest["backend"], run.manifest.get("endpoint") or {}
    served = backend.get("served_model") or backend.get("model")
    return Check(
        "weights",
        NOT_CHECKABLE,
        f"a remote run's weights and serving stack are the server's ({served!r} at "
        f"{endpoint.get('base_url')}), not files here; only a replay tests what it computes",
    )


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
    """records.jsonl, resolutions.jsonl, every part file and every side file (signals/*.npy)
    against the sha256 sealed in the manifest; a seal written before side files were sealed
    passes with a warning that they were not."""
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
    problems += _compare_named("part file", run.root / PARTS, sealed_parts, present)
    side = {path.name: path for path in side_files(run.root)}
    warnings = ()
    sealed_side = seal.get(SEALED_SIDE_FILES)
    if sealed_side is not None:
        problems += _compare_named("side file", run.root / SIGNALS_DIR, sealed_side, side)
    elif side:  # sealed before the side files were: say so, as for an unsealed run
        warnings = (
            f"the {len(side)} side files in {run.root / SIGNALS_DIR} were not sealed (a seal "
            "written before side files were): they are not checked against hashes",
        )
    if problems:
        return Check("integrity", FAIL, summary(problems, "integrity problems"), warnings)
    also = f", {len(sealed_side)} side files ({SIGNALS_DIR}/)" if sealed_side else ""
    return Check(
        "integrity",
        OK,
        f"records.jsonl{also} and {len(sealed_parts)} part files match the sha256 sealed in the "
        "manifest",
        warnings,
    )


def _compare_named(
    what: str, folder: Path, sealed: dict, present: dict[str, Path], where: str = "the seal"
) -> list[str]:
    """The files of `folder` (`present`, by name) against the sha256 by name that `where` (the
    manifest's seal, or its inputs) lists: each one changed, missing, or not listed."""
    problems = []
    for name in sorted(set(sealed) | set(present)):
        if name not in present:
            problems.append(f"{what} {folder / name}: missing, though {where} lists it")
        elif name not in sealed:
            problems.append(f"{what} {present[name]}: not in {where}")
        else:
            problems += _compare_file(what, present[name], {"sha256": sealed[name]})
    return problems
