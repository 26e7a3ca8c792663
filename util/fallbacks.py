"""Every fallback from a fast path to another one: warned once, and kept for the run manifest.

A path that cannot run (a kernel that refuses a shape, a captured step that disagrees with the
eager one, a device without a library) never switches silently. It calls `record(path, used,
reason)`: the first time a (path, used) pair is seen it warns once with a `FallbackWarning` that
names the path, what runs instead and why, and `taken()` lists every fallback of the process, in
the order they happened, for the manifest (the runner writes them beside the seal:
splice/rundir/manifest.py). The list is process-wide on purpose: a fallback is a fact about the
device and the libraries, whichever engine or layer met it first.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import asdict, dataclass


class FallbackWarning(RuntimeWarning):
    """A fast path did not run; the message names it, what ran instead and why."""


@dataclass(frozen=True)
class Fallback:
    path: (
        str  # what was meant to run, e.g. "static_decode bucket 32" or "scaled_mm layers.0.q_proj"
    )
    used: str  # what runs instead
    reason: str  # why, in one line

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


_lock = threading.Lock()
_taken: dict[tuple[str, str], Fallback] = {}


def record(path: str, used: str, reason: str) -> Fallback:
    """Note that `path` fell back to `used` because of `reason`; warn the first time only."""
    reason = " ".join(str(reason).split())  # one line, whatever the exception text was
    key = (path, used)
    with _lock:
        first = key not in _taken
        if first:
            _taken[key] = Fallback(path, used, reason)
        fallback = _taken[key]
    if first:
        warnings.warn(f"{path}: falling back to {used}: {reason}", FallbackWarning, stacklevel=2)
    return fallback


def taken() -> list[Fallback]:
    """Every fallback recorded in this process, first first."""
    with _lock:
        return list(_taken.values())


def reset() -> None:
    """Forget every fallback (a test, or a new run in the same process)."""
    with _lock:
        _taken.clear()
