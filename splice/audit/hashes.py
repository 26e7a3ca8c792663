"""The audit's hash checks: a run's inputs and its sealed files (completeness.py and replay.py do
the others).

    check_inputs(run)     the checkpoint (a remote run: its tokenizer), data and sentences files
                          against the manifest's sha256
    check_weights(run)    a remote run only: says that its weights cannot be checked here
    check_integrity(run)  records.jsonl, every part file and side file against the manifest's seal

Every hash is computed from the file's bytes, never taken from the hash cache, and nothing is
written into the run directory.
"""

from __future__ import annotations

from pathlib import Path

from nudgeability.splice.audit.check import FAIL, NOT_CHECKABLE, OK, UNSEALED, Check, summary
from nudgeability.splice.audit.stored_run import StoredRun
from nudgeability.splice.run.remote import tokenizer_files
from nudgeability.splice.rundir.layout import MANIFEST, RECORDS, SIGNALS_DIR
from nudgeability.splice.rundir.manifest_keys import compare_manifests
from nudgeability.splice.rundir.provenance import git_commit, package_versions
from nudgeability.splice.rundir.seal import check_seal, file_problem, named_file_problems


# ----- inputs --------------------------------------------------------------------------------------
def check_inputs(
    run: StoredRun,
    model: str | None = None,
    data: str | None = None,
    sentences: str | None = None,
    tokenizer: str | None = None,
    interventions: str | None = None,
) -> Check:
    """Re-hash the checkpoint (a remote run: its tokenizer), data and sentences files (from the
    bytes, never a cached hash) and compare them with the manifest; `model`, `data`,
    `sentences`, `tokenizer` give moved files again. Package versions and the git commit that
    differ are warnings. A run with `--interventions` has its file re-hashed too (`interventions`
    gives it again)."""
    inputs = run.manifest.inputs
    problems = []
    files = [("data", data), ("sentences", sentences)]
    if "interventions" in inputs:
        files.append(("interventions", interventions))
    for name, override in files:
        stored = inputs.get(name, {})
        path = override or stored.get("path")
        problems.extend(file_problem(f"{name} file", path, stored, f"--{name}"))
    if run.remote:
        found, count = _tokenizer_problems(inputs.get("tokenizer", {}), tokenizer)
        what = f"tokenizer ({count} files)"
    else:
        spec = model or run.manifest.config["model"]
        found, count = _checkpoint_problems(inputs.get("checkpoint", {}), spec)
        what = f"checkpoint ({count} files)"
    problems += found
    now = {"versions": package_versions(), "git_commit": git_commit()}
    _, changed = compare_manifests(
        {k: run.manifest.data.get(k) for k in now}, now, ("the run had", "this checkout has")
    )
    if problems:
        return Check("inputs", FAIL, summary(problems, "input problems"), tuple(changed))
    names = "data, sentences and interventions" if len(files) > 2 else "data and sentences"
    detail = f"{what}, {names} files re-hashed: equal to the manifest"
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
    problems = named_file_problems(
        "checkpoint file", source.directory, stored.get("files", {}), files, "the manifest"
    )
    gguf = stored.get("gguf")
    if (gguf is None) != (source.gguf is None):
        problems.append(f"checkpoint {spec}: GGUF {source.gguf}, the manifest says {gguf}")
    elif gguf is not None:
        problems.extend(file_problem("checkpoint GGUF", source.gguf, gguf, "--model"))
    return problems, count


def _tokenizer_problems(stored: dict, override: str | None) -> tuple[list[str], int]:
    """A remote run's tokenizer files against the manifest's sha256; (problems, files)."""
    listed = stored.get("files", {})
    directory = Path(override or stored.get("directory") or "")
    if not directory.is_dir():
        hint = "; if it moved, pass its new place with --tokenizer"
        return [f"tokenizer directory {directory}: missing{hint}"], len(listed)
    files = {path.name: path for path in tokenizer_files(directory)}
    return named_file_problems("tokenizer file", directory, listed, files, "the manifest"), len(
        listed
    )


def check_weights(run: StoredRun) -> Check:
    """What no file here can show for a remote run: the weights and serving stack behind the
    endpoint are the provider's. Reported, never failed (only a replay tests what they compute)."""
    backend, endpoint = run.manifest.backend or {}, run.manifest.endpoint or {}
    served = backend.get("served_model") or backend.get("model")
    return Check(
        "weights",
        NOT_CHECKABLE,
        f"a remote run's weights and serving stack are the server's ({served!r} at "
        f"{endpoint.get('base_url')}), not files here; only a replay tests what it computes",
    )


# ----- integrity --------------------------------------------------------------------------------
def check_integrity(run: StoredRun) -> Check:
    """records.jsonl, resolutions.jsonl, every part file and every side file (signals/*.npy)
    against the sha256 sealed in the manifest (splice/rundir/seal.py `check_seal`); a seal written
    before side files were sealed passes with a warning that they were not."""
    sealed = check_seal(run.root, run.manifest.data)
    if not sealed.sealed:
        return Check(
            "integrity",
            UNSEALED,
            f"{run.root / MANIFEST} holds no seal (a run made before sealing existed, or one "
            "that never finished): the records cannot be checked against hashes",
        )
    if sealed.problems:
        return Check(
            "integrity", FAIL, summary(list(sealed.problems), "integrity problems"), sealed.warnings
        )
    also = f", {sealed.side_files} side files ({SIGNALS_DIR}/)" if sealed.side_files else ""
    return Check(
        "integrity",
        OK,
        f"{RECORDS}{also} and {sealed.parts} part files match the sha256 sealed in the manifest",
        sealed.warnings,
    )
