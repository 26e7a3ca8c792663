"""A directory built once for the whole test session, however many pytest-xdist workers ask for it.

pytest-xdist runs a session-scoped fixture once per worker; its documented recipe for work that
must run once ("Making session-scoped fixtures execute only once") is a file lock in the
temporary root the workers share: the first worker to ask builds, the others wait on the lock and
then read what it built. A real-model run that several tests check is built this way, so that
the suite pays for it once. The tests only read it (they copy it where they change it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """`ROOT/name`, filled by `build(directory)` once per test session (module docstring); a build
    that failed is tried again by the next test that asks."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's root, above each worker's own
    directory, built = root / name, root / f"{name}.built"
    with FileLock(f"{root / name}.lock"):
        if not built.exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            build(directory)
            built.touch()
    return directory
