"""A run directory opened for work: its manifest, finished units as part files, the final files.

What each file holds, and in which order the runner writes them, is in splice/rundir/README.md.
Every file is written to a temporary name, fsynced and renamed into place (`util/atomic.py`),
so a run killed at any moment leaves either a whole file or none: a resumed run reuses the parts
whose bytes hash to what this run recorded (the seal, or the part journal: splice/rundir/seal.py)
and recomputes the rest. A lock file keeps two processes from working in one directory at once.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from nudgeability.splice.rundir.layout import (
    DAMAGED,
    LOCK,
    MANIFEST,
    PART_SUFFIX,
    PARTS,
    RECORDS,
    TIMINGS,
    part_file,
)
from nudgeability.splice.rundir.manifest import OutputDirError, manifest_text, read_manifest
from nudgeability.splice.rundir.manifest_keys import FALLBACKS_KEY, compare_manifests
from nudgeability.splice.rundir.part_check import part_problem
from nudgeability.splice.rundir.plan import Unit
from nudgeability.splice.rundir.seal import (
    part_hash_problem,
    record_part_hash,
    remove_part_journal,
    trusted_part_hashes,
    unverified_parts,
    write_sealed_manifest,
)
from nudgeability.util.atomic import (
    atomic_directory,
    atomic_write_bytes,
    atomic_write_lines,
    directory_problem,
    remove_temporaries,
)
from nudgeability.util.json_lines import split_lines

try:  # POSIX advisory locks; released by the kernel when the process dies, even by SIGKILL
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


class ConfigChangedError(OutputDirError):
    """An existing output directory was made by a different config; the message lists the keys."""


class PartChangedError(OutputDirError):
    """A part file changed under a working run (after it was checked or written)."""


def part_path(root: Path, unit: Unit) -> Path:
    """Where a run directory stores a finished unit's records."""
    return Path(root) / part_file(unit.name)


class WorkStore:
    """An output directory opened for work. Use `WorkStore.open`; call `close` (or use `with`)."""

    def __init__(self, root: Path, lock_fd: int | None, provenance_changes: list[str]):
        self.root = Path(root)
        self.parts = self.root / PARTS
        self._lock_fd = lock_fd
        self.provenance_changes = provenance_changes  # versions / git commit that differ on resume
        # part file name -> the sha256 it must hash to: the seal's and the part journal's
        self._trusted = trusted_part_hashes(self.root, read_manifest(self.root).data)

    @classmethod
    def open(cls, out: str | os.PathLike, manifest: dict) -> WorkStore:
        """Create `out` with `manifest`, or reopen it for resuming when its manifest is equal.

        A new directory appears whole (made under a temporary name and renamed), so a failure
        leaves nothing behind. An existing directory whose manifest differs in what decides the
        records raises `ConfigChangedError` listing every differing key; differing versions or git
        commit are kept in `provenance_changes` for the caller to report. A directory that is not
        empty and holds no manifest raises `OutputDirError`.
        """
        out = Path(out).absolute()
        problem = directory_problem(out)
        if problem is not None:
            raise OutputDirError(f"--out {out}: {problem}; pass another --out")
        provenance: list[str] = []
        if not out.exists() or not any(out.iterdir()):
            _create(out, manifest)
        else:
            differences, provenance = compare_manifests(read_manifest(out).data, manifest)
            if differences:
                raise ConfigChangedError(
                    f"{out / MANIFEST}: this directory holds a run with another config "
                    f"({len(differences)} difference(s): {'; '.join(differences)}); pass the same "
                    "arguments to resume it, or another --out"
                )
        store = cls(out, _lock(out), provenance)
        store.parts.mkdir(exist_ok=True)
        # Temp files of a killed run (the lock says no other process works here).
        remove_temporaries(store.parts)
        remove_temporaries(out)
        return store

    def close(self) -> None:
        """Release the lock and remove its file (`_lock` makes that safe for a waiting run)."""
        if self._lock_fd is not None:
            (self.root / LOCK).unlink(missing_ok=True)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> WorkStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----- parts ----------------------------------------------------------------------------------
    def part_path(self, unit: Unit) -> Path:
        return part_path(self.root, unit)

    def has(self, unit: Unit) -> bool:
        """Whether the unit finished (its part file exists, whole)."""
        return self.part_path(unit).is_file()

    def write_part(
        self, unit: Unit, lines: list[str], dependents: Iterable[Unit] = ()
    ) -> list[tuple[Unit, Path]]:
        """Store a finished unit's record lines (possibly none) atomically, its sha256 recorded in
        the part journal first.

        A unit computed again whose bytes differ from the ones the run recorded for it before
        (a server's answer that changed) makes the stored parts of its `dependents`, which were
        computed from the old bytes, unverified: they are set aside first, before the new part
        lands, so that a kill in between cannot leave them trusted. Returns those moved (unit,
        where it went)."""
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        recorded = self._trusted.get(self.part_path(unit).name)
        moved = []
        if recorded is not None and recorded != hashlib.sha256(data).hexdigest():
            moved = [(dep, self.set_aside(dep)) for dep in dependents if self.has(dep)]
        self._store_part(unit, data)
        return moved

    def copy_part(self, unit: Unit, source: Path) -> None:
        """Store the bytes of the part file at `source` (another directory's) as this unit's part."""
        self._store_part(unit, Path(source).read_bytes())

    def _store_part(self, unit: Unit, data: bytes) -> None:
        path = self.part_path(unit)
        self._trusted[path.name] = record_part_hash(self.root, path.name, data)
        atomic_write_bytes(path, data)

    def part_problem(self, unit: Unit, expected: set) -> str | None:
        """What keeps the stored part of `unit` from being reused, or None: bytes other than the
        ones this run recorded (the seal's or the journal's sha256), or a form other than its
        `expected` record keys (splice/rundir/part_check.py), both said when both hold."""
        path = self.part_path(unit)
        problems = [part_hash_problem(path, self._trusted), part_problem(path, expected)]
        return "; ".join(problem for problem in problems if problem) or None

    def set_aside(self, unit: Unit) -> Path:
        """Move a damaged part out of `parts/` (kept for inspection); return where it went."""
        target_dir = self.root / DAMAGED
        target_dir.mkdir(exist_ok=True)
        number = 1
        while (target := target_dir / f"{unit.name}.{number}{PART_SUFFIX}").exists():
            number += 1
        os.replace(self.part_path(unit), target)
        return target

    def read_part(self, unit: Unit) -> list[str]:
        """The record lines of a finished unit, read only when they are the bytes this run wrote
        or verified (else `PartChangedError`, naming the file)."""
        path = self.part_path(unit)
        problem = part_hash_problem(path, self._trusted)
        if problem is not None:
            raise PartChangedError(
                f"{path}: changed while this run worked ({problem}); run the same command again"
            )
        return split_lines(path.read_text(encoding="utf-8"))

    # ----- final files ----------------------------------------------------------------------------
    def append_timing(self, entry: dict) -> None:
        """Append one line to timings.jsonl with a single write (no torn line if killed)."""
        data = (json.dumps(entry, sort_keys=True) + "\n").encode("utf-8")
        fd = os.open(self.root / TIMINGS, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def write_records(self, lines: Iterable[str], name: str = RECORDS) -> Path:
        """Write records.jsonl (or `name`, e.g. RESOLUTIONS) atomically from `lines`; its path."""
        path = self.root / name
        atomic_write_lines(path, lines)
        return path

    def seal(self, schedule: dict | None = None) -> None:
        """Rewrite the manifest with the seal of records.jsonl, every part file and every side
        file, atomically (splice/rundir/seal.py).

        Called last, when records.jsonl is written: the stored manifest (the one the run started
        with, whatever code resumes it) is kept, and only its seal is replaced. Every part must
        still be the bytes this run wrote or verified, else nothing is sealed (`PartChangedError`);
        the part journal, whose hashes the seal now holds, is removed after. Beside the seal it
        lists every fallback taken (`util/fallbacks.py`): this process's, after those a manifest
        sealed before lists; and `schedule`, the schedule this process computed with."""
        problems = unverified_parts(self.root, self._trusted)
        if problems:
            raise PartChangedError(
                f"{self.root}: not sealed: {problems[0]}"
                + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
                + "; run the same command again"
            )
        from nudgeability.util import fallbacks

        stored = read_manifest(self.root).data
        # a resumed run keeps what the processes before it took: their parts were computed so
        taken = list(stored.get(FALLBACKS_KEY, []))
        taken += [f.as_dict() for f in fallbacks.taken() if f.as_dict() not in taken]
        write_sealed_manifest(self.root, stored, taken, schedule)
        remove_part_journal(self.root)


def _create(out: Path, manifest: dict) -> None:
    # The rename replaces an empty directory too, and fails if another run made `out` meanwhile.
    try:
        with atomic_directory(out) as tmp:
            atomic_write_lines(tmp / MANIFEST, [manifest_text(manifest)])
            (tmp / PARTS).mkdir()
    except OSError as exc:
        raise OutputDirError(
            f"--out {out}: cannot create the output directory ({exc.strerror or exc}); pass "
            "another --out"
        ) from None


def _lock(out: Path) -> int | None:
    """Hold the directory's lock file. The holder removes it when it closes, so a lock taken on a
    file that was meanwhile removed (or replaced) is no lock: it is dropped and taken again."""
    if fcntl is None:  # pragma: no cover
        return None
    path = out / LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise OutputDirError(
                f"{out}: another `nudge run` is working in this directory; wait for it "
                "to finish or pass another --out"
            ) from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
