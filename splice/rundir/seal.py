"""The seal of a finished run: the hashes of what it wrote, and the check of a directory against it.

The seal is the manifest's `seal` entry: the sha256 and line count of `records.jsonl` (and of
`resolutions.jsonl`), the sha256 of every part file and of every side file in `signals/` (the
hidden states stats reads beside the records), each by name. It is written last, with the
manifest, by the runner (`WorkStore.seal`) and by `nudge merge` (`write_sealed_manifest`), and
checked here, by `check_seal`: the one place that says whether a run directory's files are the ones
it sealed (`nudge verify`'s integrity line reports it). A seal written before side files were
sealed has no `signals` entry. Hashes are always read from the bytes, never from the hash cache.

A run that has not finished has no seal. What protects its parts is the part journal,
`part_hashes.jsonl`: before a part is renamed into place, one line naming it and the sha256 of
its bytes is appended (`record_part_hash`), so a part on disk always has its hash. A resumed
run reuses a stored part only when its bytes hash to the last hash the journal gives it, or,
for a part not written since the seal, to the seal's (`trusted_part_hashes`, `part_hash_problem`);
a part another run wrote, or one edited by hand, is damaged and its unit computed again. Sealing
checks every part against the same hashes first, so nothing unverified is sealed, and then
removes the journal: the seal holds the same hashes.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from nudgeability.splice.rundir.layout import (
    MANIFEST,
    PART_HASHES,
    PART_SUFFIX,
    PARTS,
    RECORDS,
    RESOLUTIONS,
    SIDE_SUFFIX,
    SIGNALS_DIR,
)
from nudgeability.splice.rundir.manifest import manifest_text
from nudgeability.splice.rundir.manifest_keys import FALLBACKS_KEY, SCHEDULE_KEY, SEAL_KEY
from nudgeability.splice.rundir.provenance import sha256_file
from nudgeability.util.atomic import atomic_write_lines, fsync_directory

# the seal's entry for the side files; a seal written before side files were sealed lacks it
SEALED_SIDE_FILES = "signals"


def side_files(root: Path) -> list[Path]:
    """The side files of a run directory that stats reads beside the records (signals/*.npy)."""
    return sorted((Path(root) / SIGNALS_DIR).glob(f"*{SIDE_SUFFIX}"))


def part_files(root: Path) -> list[Path]:
    """The part files of a run directory (parts/*.jsonl), by name."""
    return sorted((Path(root) / PARTS).glob(f"*{PART_SUFFIX}"))


def seal_of(root: Path) -> dict:
    """The seal of the run directory `root` as its files are now (see the module docstring)."""
    root = Path(root)
    seal = {
        "records": _sealed_lines(root / RECORDS),
        "parts": {p.name: sha256_file(p, cached=False) for p in part_files(root)},
        SEALED_SIDE_FILES: {p.name: sha256_file(p, cached=False) for p in side_files(root)},
    }
    if (root / RESOLUTIONS).is_file():
        seal["resolutions"] = _sealed_lines(root / RESOLUTIONS)
    return seal


def write_sealed_manifest(
    root: Path,
    manifest: dict,
    fallbacks: list[dict] | None = None,
    schedule: dict | None = None,
) -> None:
    """Write `manifest` into `root` with the seal of its files, atomically (the last write), and,
    when given, the fallbacks the run took (`FALLBACKS_KEY`) and its schedule (`SCHEDULE_KEY`;
    neither is compared)."""
    manifest = {**manifest, SEAL_KEY: seal_of(root)}
    if fallbacks is not None:
        manifest[FALLBACKS_KEY] = fallbacks
    if schedule is not None:
        manifest[SCHEDULE_KEY] = schedule
    atomic_write_lines(Path(root) / MANIFEST, [manifest_text(manifest)])


def _sealed_lines(path: Path) -> dict:
    with open(path, "rb") as handle:
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 23), b""))
    return {"sha256": sha256_file(path, cached=False), "lines": lines}


# ----- checking files against recorded hashes -----------------------------------------------------
def file_problem(what: str, path: str | Path | None, stored: dict, flag: str = "") -> list[str]:
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


def named_file_problems(
    what: str, folder: Path, listed: dict, present: dict[str, Path], where: str = "the seal"
) -> list[str]:
    """The files of `folder` (`present`, by name) against the sha256 by name that `where` (the
    manifest's seal, or its inputs) lists: each one changed, missing, or not listed."""
    problems = []
    for name in sorted(set(listed) | set(present)):
        if name not in present:
            problems.append(f"{what} {folder / name}: missing, though {where} lists it")
        elif name not in listed:
            problems.append(f"{what} {present[name]}: not in {where}")
        else:
            problems += file_problem(what, present[name], {"sha256": listed[name]})
    return problems


@dataclass(frozen=True)
class SealCheck:
    """A run directory's files against its manifest's seal."""

    sealed: bool  # whether the manifest holds a seal at all
    problems: tuple[str, ...] = ()  # one line each: a file changed, missing or not sealed
    warnings: tuple[str, ...] = ()
    parts: int = 0  # part files the seal lists
    side_files: int = 0  # side files the seal lists (0 also for a seal without the entry)


def check_seal(root: Path, manifest: dict) -> SealCheck:
    """records.jsonl, resolutions.jsonl, every part file and every side file of `root` against
    the seal in `manifest`. A seal written before side files were sealed passes them with a
    warning that they were not checked."""
    root = Path(root)
    seal = manifest.get(SEAL_KEY)
    if seal is None:
        return SealCheck(sealed=False)
    problems = []
    records = root / RECORDS
    if records.is_file():
        problems += file_problem("records file", records, seal.get("records", {}))
    else:
        problems.append(f"{records}: missing, though the manifest is sealed")
    resolutions = root / RESOLUTIONS  # a run made with --resolve
    if "resolutions" in seal or resolutions.is_file():
        problems += file_problem("resolutions file", resolutions, seal.get("resolutions", {}))
    sealed_parts = seal.get("parts", {})
    present = {path.name: path for path in part_files(root)}
    problems += named_file_problems("part file", root / PARTS, sealed_parts, present)
    side = {path.name: path for path in side_files(root)}
    warnings = ()
    sealed_side = seal.get(SEALED_SIDE_FILES)
    if sealed_side is not None:
        problems += named_file_problems("side file", root / SIGNALS_DIR, sealed_side, side)
    elif side:  # sealed before the side files were: say so, as for an unsealed run
        warnings = (
            f"the {len(side)} side files in {root / SIGNALS_DIR} were not sealed (a seal "
            "written before side files were): they are not checked against hashes",
        )
    return SealCheck(True, tuple(problems), warnings, len(sealed_parts), len(sealed_side or {}))


# ----- the parts a run may reuse: the seal's hashes and the part journal's --------------------------
def record_part_hash(root: Path, name: str, data: bytes) -> str:
    """Append the sha256 of the part `name`'s bytes `data` to the part journal, durably, before
    the part is renamed into place; its hex digest. One write per line: a kill leaves no torn line
    (and a torn line at the end, after a crash of the disk, is read as no line)."""
    digest = hashlib.sha256(data).hexdigest()
    line = (json.dumps({"part": name, "sha256": digest}, sort_keys=True) + "\n").encode()
    fd = os.open(Path(root) / PART_HASHES, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    return digest


def _journal(root: Path) -> dict[str, str]:
    path = Path(root) / PART_HASHES
    if not path.is_file():
        return {}
    hashes = {}
    for raw in path.read_bytes().split(b"\n"):
        try:
            entry = json.loads(raw)
            hashes[entry["part"]] = entry["sha256"]  # a unit computed again: its last line counts
        except (ValueError, TypeError, KeyError):
            continue  # a torn last line: its part, if it was renamed at all, is unverified
    return hashes


def trusted_part_hashes(root: Path, manifest: dict) -> dict[str, str]:
    """Part file name -> the sha256 its bytes must have to be reused: the seal's, replaced by the
    part journal's for every part written since (see the module docstring)."""
    return {**manifest.get(SEAL_KEY, {}).get("parts", {}), **_journal(root)}


def part_hash_problem(path: Path, trusted: dict[str, str]) -> str | None:
    """None when the part at `path` hashes to its trusted sha256; else what is wrong, in words."""
    if path.name not in trusted:
        return "no sha256 was recorded for it: this run did not write it"
    digest = sha256_file(path, cached=False)
    if digest != trusted[path.name]:
        return (
            f"its sha256 {digest[:12]}… is not the {trusted[path.name][:12]}… this run recorded: "
            "not the bytes this run wrote"
        )
    return None


def unverified_parts(root: Path, trusted: dict[str, str]) -> list[str]:
    """One line per part file of `root` that is not, byte for byte, a part this run wrote or
    verified: what must hold before a seal is written."""
    present = {path.name: path for path in part_files(root)}
    listed = {name: digest for name, digest in trusted.items() if name in present}
    return named_file_problems("part file", Path(root) / PARTS, listed, present, "the part hashes")


def remove_part_journal(root: Path) -> None:
    """Remove the part journal once the seal holding its hashes is written."""
    (Path(root) / PART_HASHES).unlink(missing_ok=True)
    fsync_directory(root)
