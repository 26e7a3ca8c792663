"""Write a file or a whole directory so that readers see either the old state or the new, never half.

Every file the project writes that someone may read later (the GGUF conversion cache, run
directories, part files, records, merge output, stats.json, tables, figures) goes through here:

- `atomic_write_bytes` / `atomic_write_text` / `atomic_write_lines`: write a temporary file next to
  the target, fsync it, rename it over the target, fsync the directory. A kill or a full disk at
  any moment leaves the previous file intact (or no file).
- `atomic_write_files({path: bytes, ...})`: the same for a set of files written together (tables
  and stats.json, a report's figures): every temporary is written and fsynced before the first
  rename, so a kill while writing leaves every previous file.
- `atomic_directory(target)`: a context manager that yields a temporary directory next to
  `target`; on a clean exit it is renamed to `target`, on an exception it is removed.
- `remove_temporaries(directory)`: delete the temporaries a killed writer left behind.
- `directory_problem(path)`: why no output directory can be made at `path` (a file is in the way).

Temporaries are named `.{target name}.tmp-{pid}-{random}`, so they are hidden, say what they
were for, and say which process made them: `only_abandoned=True` removes only those whose
process is gone (a concurrent writer's temporaries are left alone). They are created as `open()`
and `mkdir()` create files (modes 0666 and 0777 less the umask), not as `tempfile`'s private
0600/0700 ones, so the renamed file is as readable as any other file the user writes: 0644 under
umask 022, 0600 under 077.

Why here: this module needs only the standard library and every layer writes files, from `models`
(the GGUF conversion cache) to `stats`; in util/, the bottom layer, each imports it without data
flowing backwards.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

TMP_MARK = ".tmp-"


def temporary_prefix(name: str) -> str:
    """The name prefix of every temporary made for a target called `name` by this process."""
    return f".{name}{TMP_MARK}{os.getpid()}-"


def _temporary_name(target: Path) -> Path:
    return target.parent / (temporary_prefix(target.name) + secrets.token_hex(4))


def _new_temporary_file(target: Path) -> tuple[int, Path]:
    """A new temporary file next to `target`, open for writing, with the umask's mode."""
    while True:
        tmp = _temporary_name(target)
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:  # pragma: no cover - 32 random bits taken by this very process
            continue


def _new_temporary_directory(target: Path) -> Path:
    """A new empty temporary directory next to `target`, with the umask's mode."""
    while True:
        tmp = _temporary_name(target)
        try:
            os.mkdir(tmp, 0o777)
            return tmp
        except FileExistsError:  # pragma: no cover
            continue


def fsync_directory(path: str | os.PathLike) -> None:
    """Make a rename inside `path` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some filesystems refuse fsync on a directory
        pass
    finally:
        os.close(fd)


def atomic_write_chunks(path: str | os.PathLike, chunks: Iterable[bytes]) -> Path:
    """Write the byte `chunks` to `path` atomically: temp file, fsync, rename. Returns `path`.

    `chunks` may be a generator; if it raises, the temporary is removed and `path` is untouched.
    """
    path = Path(path)
    fd, tmp = _new_temporary_file(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` atomically."""
    return atomic_write_chunks(path, [data])


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8, newlines as given) to `path` atomically."""
    return atomic_write_chunks(path, [text.encode("utf-8")])


def atomic_write_lines(path: str | os.PathLike, lines: Iterable[str]) -> Path:
    """Write `lines` (each gets a trailing "\\n") to `path` atomically, as UTF-8."""
    return atomic_write_chunks(path, ((line + "\n").encode("utf-8") for line in lines))


def atomic_write_files(files: Mapping[str | os.PathLike, bytes]) -> list[Path]:
    """Write every `path: data` pair; all temporaries are complete before any rename. Returns the
    paths in the order given."""
    staged: list[tuple[str, Path]] = []
    try:
        for path, data in files.items():
            path = Path(path)
            fd, tmp = _new_temporary_file(path)
            staged.append((tmp, path))
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)
        raise
    for directory in dict.fromkeys(path.parent for _, path in staged):
        fsync_directory(directory)
    return [path for _, path in staged]


@contextlib.contextmanager
def atomic_directory(target: str | os.PathLike, replace: bool = False) -> Iterator[Path]:
    """Yield an empty temporary directory next to `target`; rename it to `target` on a clean exit.

    On an exception the temporary is removed and `target` is untouched. When `target` exists the
    rename succeeds only if it is an empty directory, unless `replace` is true: then the old
    directory is removed first (a reader between the two steps sees no directory, never a
    half-written one).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_temporary_directory(target)
    try:
        yield tmp
        if replace and target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    fsync_directory(target.parent)


def directory_problem(path: str | os.PathLike) -> str | None:
    """Why no directory can be made or written into at `path`, in words, or None: the path is a
    file, or one of its parents is (checked before any work, so that the command fails at once)."""
    path = Path(path).absolute()
    for place in (path, *path.parents):
        if place.exists():
            if place.is_dir():
                return None
            if place == path:
                return "exists and is a file, not a directory"
            return f"{place} is a file, not a directory"
    return None


def remove_temporaries(
    directory: str | os.PathLike, name: str = "*", only_abandoned: bool = False
) -> list[Path]:
    """Remove the temporaries for targets called `name` (a glob) in `directory`; return them.

    With `only_abandoned`, a temporary is removed only when the process that made it no longer
    runs on this machine, so a writer working at the same moment keeps its own.
    """
    removed = []
    for path in sorted(Path(directory).glob(f".{name}{TMP_MARK}*")):
        if only_abandoned and _maker_alive(path.name):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def _maker_alive(temporary_name: str) -> bool:
    """Whether the process whose pid the temporary's name carries still runs (unknown: assume so)."""
    pid_text = temporary_name.rpartition(TMP_MARK)[2].partition("-")[0]
    if not pid_text.isdigit():
        return True
    pid = int(pid_text)
    if pid == os.getpid():  # another writer in this very process: leave it alone
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but belongs to someone else
        return True
    return True
