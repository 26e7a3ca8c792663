"""Probes around an in-process `nudge run` (benchmarks/workers_memory.py): the peak resident size
of each phase (the model's load, the needle, the work; Linux's VmHWM, reset at each boundary
through /proc/self/clear_refs) and what is resident after it (anonymous and file pages, glibc's
C heap), and each step of the run's engine: its peak, the pool's blocks in use and live tokens
(`EngineStats.trace`), and at each step that sets a new peak the pool's resident bytes, page by
page (`mincore`). `weight_bytes` counts every distinct parameter and buffer storage once."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from nudgeability.costs.memory import reset_peak

MIB = 2**20
PAGE = os.sysconf("SC_PAGE_SIZE")
RATIO = 1.3  # the target: the peak within 1.3x of weights + peak live KV


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    ]


_LIBC = ctypes.CDLL(None)
_LIBC.mallinfo2.restype = _MallInfo2
_LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def status() -> dict[str, int]:
    """VmRSS, VmHWM (the peak since the last reset), RssAnon and RssFile, in bytes."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) * 1024
    return out


def heap() -> dict[str, int]:
    """The C heap (glibc): bytes in use in its arenas, bytes freed but kept in them (resident
    unless `malloc_trim` handed their pages back), bytes in blocks mapped on their own."""
    info = _LIBC.mallinfo2()
    return {"heap_used": info.uordblks, "heap_free": info.fordblks, "heap_mapped": info.hblkhd}


def resident(tensor) -> int:
    """Bytes of `tensor`'s storage whose pages are resident (`mincore`)."""
    storage = tensor.untyped_storage()
    start, size = storage.data_ptr(), storage.nbytes()
    if size == 0:
        return 0
    first = start // PAGE * PAGE
    length = start + size - first
    pages = -(-length // PAGE)
    vec = (ctypes.c_ubyte * pages)()
    if _LIBC.mincore(first, length, vec) != 0:
        raise OSError(ctypes.get_errno(), "mincore failed")
    return sum(b & 1 for b in bytes(vec)) * PAGE


class Probe:
    """Phases and steps of one in-process `nudge run` (module docstring)."""

    def __init__(self):
        self.phases: list[dict] = []
        self.steps: list[dict] = []
        self.phase = "libraries"
        self.engine = None
        self.model = None
        self.best = 0
        reset_peak()

    def mark(self, next_phase: str) -> None:
        """Close the current phase (its peak, what is resident after it); start `next_phase`."""
        now = status()
        self.phases.append({"phase": self.phase, "peak": now["VmHWM"], **now, **heap()})
        reset_peak()
        self.phase = next_phase

    def step(self, engine) -> None:
        now = status()
        reset_peak()
        pool, trace = engine.pool, engine.stats.trace
        row = {
            "peak": now["VmHWM"],
            "rss": now["VmRSS"],
            "in_use": pool.in_use * pool.block_size * pool.slot_bytes(),
            "live": (trace[-1].live_tokens if trace else 0) * pool.slot_bytes(),
            "tokens": trace[-1].tokens if trace else 0,
        }
        if now["VmHWM"] > self.best:  # the pages counted only where the peak rises
            self.best = now["VmHWM"]
            row["pool"] = sum(resident(t) for t in pool.k + pool.v if t is not None)
            row.update(heap())
        self.steps.append(row)


def install(probe: Probe) -> None:
    """Wrap the runner's functions with the probe's marks (module docstring)."""
    import nudgeability.engine.engine as engine_module
    import nudgeability.splice.run.prepare as prepare
    import nudgeability.splice.run.runner as runner
    import nudgeability.splice.run.schedule as schedule

    def around(module, name, before, after, keep=None):
        inner = getattr(module, name)

        def wrapped(*args, **kwargs):
            probe.mark(before)
            out = inner(*args, **kwargs)
            if keep is not None:
                keep(out)
            probe.mark(after)
            return out

        setattr(module, name, wrapped)

    around(prepare, "load_model", "load", "prepare", lambda out: setattr(probe, "model", out.model))
    # the needle: `cached_check` since 80a1120 (read from disk when kept), `check_invariance` before
    needle = "cached_check" if hasattr(schedule, "cached_check") else "check_invariance"
    around(schedule, needle, "needle", "prepare")
    around(runner, "_streamed", "run", "records")
    around(runner, "_by_unit", "run", "records")
    make_context = runner.unit_context

    def unit_context(*args, **kwargs):
        ctx = make_context(*args, **kwargs)
        probe.engine = ctx.backend.engine
        probe.engine.stats.trace = []  # the live tokens of each step
        return ctx

    runner.unit_context = unit_context
    step = engine_module.Engine.step

    def probed_step(self):
        out = step(self)
        if self is probe.engine:
            probe.step(self)
        return out

    engine_module.Engine.step = probed_step


def weight_bytes(model) -> int:
    """The bytes of every distinct parameter and buffer storage (a tied LM head counted once),
    and of each linear kept only in oneDNN's layout (engine/invariant/cpu/reordered.py: no storage to count)
    at its fp32 weight's own size, as loaded (its blocked copy's padding, if any, is not
    weights)."""
    storages = {}
    for t in [*model.parameters(), *model.buffers()]:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    reordered = sum(
        m.in_features * m.out_features * 4
        for m in model.modules()
        if isinstance(getattr(m, "parts", None), list) and hasattr(m, "in_features")
    )
    return sum(storages.values()) + reordered


def mib(x: int) -> str:
    return f"{x / MIB:,.0f}"
