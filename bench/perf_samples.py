"""Where a process's CPU time fell, by shared object: Linux `perf record` on the process itself,
read back by `perf report --sort dso`.

A profiler inside Python (cProfile, torch.profiler) slows the Python it measures and sees only
its own events; sampling the process from outside at a low rate (499 Hz) leaves the run as it
was and puts every sample somewhere: in the kernels (oneDNN's generated code, `[JIT]`, and
libtorch: MKL's GEMMs, ATen's attention and elementwise loops), the OS kernel (page faults),
libc (malloc, free, memcpy), or the interpreter and torch's Python binding (host time between
kernels). The benchmarks that compare one engine with another
(benchmarks/prefill_overheads.py, benchmarks/decode_ops_against.py) split their timed work this
way. Needs `perf` on PATH and permission to attach; `recorded` yields None where either fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

# where a sample fell, by the shared object perf names
PLACES = {
    "kernels": ("[JIT]", "libtorch_cpu.so"),
    "OS kernel": ("[kernel.kallsyms]",),
    "libc": ("libc.so",),
    "interpreter + binding": ("libpython", "libtorch_python.so"),
}
RATE = 499  # samples a second
ATTACH_S = 1.0  # perf's start before the recorded work begins


@contextmanager
def recorded() -> Iterator[dict[str, float] | None]:
    """Sample this process while the block runs; after it, the dict yielded holds the shares of
    the samples by `perf_split` (empty when perf could not record; None without perf)."""
    if shutil.which("perf") is None:
        yield None
        return
    folder = tempfile.mkdtemp(prefix="nudge-perf-")
    path = os.path.join(folder, "samples.perf")
    shares: dict[str, float] = {}
    recorder = subprocess.Popen(
        ["perf", "record", "-F", str(RATE), "-p", str(os.getpid()), "-o", path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(ATTACH_S)
    try:
        yield shares
    finally:
        recorder.send_signal(signal.SIGINT)
        recorder.wait()
        # perf exits non-zero on the interrupt that stops it: what it wrote decides
        if os.path.exists(path) and os.path.getsize(path) > 0:
            shares.update(perf_split(path))
        shutil.rmtree(folder, ignore_errors=True)


def perf_split(path: str) -> dict[str, float]:
    """Shares of the samples in perf file `path` by `PLACES` (the rest: 'other')."""
    out = subprocess.run(
        ["perf", "report", "-i", path, "--no-children", "--sort", "dso", "--stdio", "-g", "none"],
        capture_output=True,
        text=True,
    ).stdout
    shares = dict.fromkeys([*PLACES, "other"], 0.0)
    for line in out.splitlines():
        parts = line.split(None, 1)
        if len(parts) != 2 or not parts[0].endswith("%") or line.lstrip().startswith("#"):
            continue
        share, dso = float(parts[0][:-1]) / 100, parts[1].strip()
        place = next((p for p, names in PLACES.items() if any(n in dso for n in names)), "other")
        shares[place] += share
    return shares
