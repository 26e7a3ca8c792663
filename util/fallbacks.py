"""Every fallback from a fast path to another one: warned once, and kept for the run manifest.

A path that cannot run (a kernel that refuses a shape, a captured step that disagrees with the
eager one, a device without a library) never switches silently. It calls `record(path, used,
reason)`: the first time a (path, used) pair is seen it warns once with a `FallbackWarning` that
names the path, what runs instead and why, and `taken()` lists every fallback of the process, in
the order they happened, for the manifest (the runner writes them beside the seal:
splice/rundir/manifest.py). The list is process-wide on purpose: a fallback is a fact about the
device and the libraries, whichever engine or layer met it first.

`launch_errors()` and `compiler_errors()` are the exceptions a fast path falls back on: what
Triton, Dynamo and Inductor raise when this device or this compiler cannot run a kernel. They are
named classes, never `Exception`: a TypeError or an IndexError in the engine's own code is a bug
to see, not a fallback to take.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import asdict, dataclass
from functools import lru_cache


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


@lru_cache(maxsize=1)
def launch_errors() -> tuple[type[Exception], ...]:
    """What a Triton kernel's first launch raises when this device cannot run it: more shared
    memory, tensor memory or threads than the device has (`OutOfResources`,
    triton/compiler/compiler.py `_init_handles`), or ptxas refusing the kernel for this GPU
    (`PTXASError`, triton/backends/nvidia/compiler.py). Triton's own autotuner skips a config on
    these (triton/runtime/autotuner.py). Not `CompilationError`: a kernel whose source does not
    compile is ours to fix. Empty without Triton (nothing of it can launch then)."""
    try:
        from triton.runtime.errors import OutOfResources, PTXASError
    except ImportError:
        return ()
    return (OutOfResources, PTXASError)


@lru_cache(maxsize=1)
def compiler_errors() -> tuple[type[Exception], ...]:
    """What a `torch.compile`d call raises when Dynamo or Inductor cannot compile or run it:
    every `TorchDynamoException` (torch/_dynamo/exc.py: `Unsupported`, a graph break under
    `fullgraph=True`; `BackendCompilerFailed` and its `InductorError`, which wrap the lowering's
    own errors, torch/_inductor/exc.py; `RecompileError`), `FailOnRecompileLimitHit` (not one of
    them), the Inductor errors raised outside Dynamo's wrapper (`OperatorIssue`,
    `CppCompileError`), and the launch errors of the Triton kernels it generated."""
    from torch._dynamo.exc import FailOnRecompileLimitHit, TorchDynamoException
    from torch._inductor.exc import CppCompileError, OperatorIssue

    compiler = (TorchDynamoException, FailOnRecompileLimitHit, OperatorIssue, CppCompileError)
    return compiler + launch_errors()
