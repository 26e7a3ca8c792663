"""Where the demo's peak memory goes: the libraries, the weights, the KV pool, and the rest.

    python benchmarks/demo_memory.py                     # the demo (n = 8); writes its section
    python benchmarks/demo_memory.py --n 2 --no-write    # a quicker look
    python benchmarks/demo_memory.py --before 1e555ab    # an earlier commit's code first, then today's

Each measured variant is one child process that runs `nudge run --task strategyqa --n N
--no-report --quiet --workers 1 --out TMP` in-process (`nudgeability.cli.main`; one process:
the default forks a worker per core, sharing the weights, which `workers_memory.py` measures
through these probes), with probes put around the runner's own functions: the model's load (`prepare.load_model`), the needle
(`schedule.check_invariance`), the work (`runner._streamed` / `_by_unit`) and every step of the
run's engine (`Engine.step`). Not timed: memory does not depend on what else the machine runs.

- **Phases**: the peak resident size of each (Linux's VmHWM, reset at each boundary through
  /proc/self/clear_refs) and what is resident after it: anonymous and file pages, and the C heap
  (glibc's `mallinfo2`: bytes in use, bytes freed but kept).
- **Steps**: each step of the run's engine, its peak and its resident size after it, with the
  pool's blocks in use and the live tokens (`EngineStats.trace`). At each step that sets a new
  peak, the pool's resident bytes are counted page by page (`mincore` over its storages).
- **The parts at the peak**: the libraries (the resident size just before the model loads: the
  interpreter, torch, transformers and what `nudge run` imports), the weights (the bytes of
  every distinct parameter and buffer storage: SmolLM2's LM head is its embedding table, counted
  once; file pages of the safetensors cache, mapped, until a run holds its linears in oneDNN's
  layout, models/reordered.py, counted then at their fp32 size), the KV pool's resident pages, of
  which the blocks in use, the step's own temporaries (its peak less what is resident after it),
  and the rest (freed heap that malloc kept, Python objects, the tokenizer, the records).

The issue's measure is the peak against the weights plus the peak live KV (the most token slots
in use at once, by blocks and by written tokens). The libraries alone are resident before any
of these, so the script sets both the whole peak and the peak less the libraries against it.
`--before REV` runs REV's code (`git archive`, bench/former.py `commit_tree`) through the same
probes, for a before/after table.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

MIB = 2**20
PAGE = os.sysconf("SC_PAGE_SIZE")
RATIO = 1.3  # the target: the peak within 1.3x of weights + peak live KV
NOTABLE = ("numba", "scipy", "bm25s", "sympy", "pandas", "matplotlib", "sklearn")


# ---- probes (the child) ------------------------------------------------------------------------
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


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


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
    and of each linear kept only in oneDNN's layout (models/reordered.py: no storage to count)
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


def child(n: int) -> dict:
    import torch  # noqa: F401  (imported by the CLI too: the libraries' share, not the run's)

    from nudgeability.cli import main

    probe = Probe()
    install(probe)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        # one process: the probes see only their own (the default's forked workers share its
        # weights; workers_memory.py sums their proportional sizes)
        argv = ["run", "--task", "strategyqa", "--n", str(n), "--no-report", "--quiet"]
        argv += ["--workers", "1"]
        code = main([*argv, "--out", str(out)])
        if code:
            raise SystemExit(f"nudge run exited {code}")
        probe.mark("end")
        md5 = hashlib.md5((out / "records.jsonl").read_bytes()).hexdigest()
    # what of the end's resident size was garbage in reference cycles, then freed heap kept
    end = [status()["VmRSS"]]
    gc.collect()
    end.append(status()["VmRSS"])
    _LIBC.malloc_trim(0)
    end.append(status()["VmRSS"])
    model = probe.model
    head = getattr(model.get_output_embeddings(), "weight", None)
    tied = head is model.get_input_embeddings().weight
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "cpu": [usage.ru_utime, usage.ru_stime, usage.ru_minflt],
        "end": end,
        "phases": probe.phases,
        "steps": probe.steps,
        "weights": weight_bytes(model),
        "tied": tied,
        "md5": md5,
        "modules": [m for m in NOTABLE if m in sys.modules],
    }


# ---- the tables (the parent) -------------------------------------------------------------------
def measure(n: int, commit: str | None) -> dict:
    """One child: today's installed code, or `commit`'s tree first on its path."""
    env = dict(os.environ)
    if commit is not None:
        from nudgeability.bench.former import commit_tree

        env["PYTHONPATH"] = str(commit_tree(commit))
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--n", str(n)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the child ({commit or 'today'}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def parts(result: dict) -> dict:
    """The breakdown at the peak step, and the issue's measure."""
    phases = {p["phase"]: p for p in result["phases"]}
    libraries = phases["libraries"]["VmRSS"]
    counted = [s for s in result["steps"] if "pool" in s]
    top = max(counted, key=lambda s: s["peak"])
    weights = result["weights"]
    live_blocks = max(s["in_use"] for s in result["steps"])
    live_tokens = max(s["live"] for s in result["steps"])
    # the steps reset the peak: the process's is the highest of the phases' and the steps'
    peak = max(x["peak"] for x in [*result["phases"], *result["steps"]])
    return {
        "peak": peak,
        "libraries": libraries,
        "weights": weights,
        "pool": top["pool"],
        "in_use": top["in_use"],
        "transient": top["peak"] - top["rss"],
        "rest": top["rss"] - libraries - weights - top["pool"],
        "step_peak": top["peak"],
        "heap_free": top["heap_free"],
        "tokens": top["tokens"],
        "live_blocks": live_blocks,
        "live_tokens": live_tokens,
        "needle": phases.get("needle", {}).get("peak", 0),
        "load": phases["load"]["peak"],
    }


def mib(x: int) -> str:
    return f"{x / MIB:,.0f}"


def report(results: dict[str, dict], n: int) -> str:
    names = list(results)
    p = {name: parts(r) for name, r in results.items()}

    def row(label, cell) -> str:
        return f"| {label} | " + " | ".join(cell(p[name], results[name]) for name in names) + " |"

    def size(key):
        return lambda q, _: mib(q[key])

    def base(q) -> int:  # the W + K: weights and the most KV blocks in use at once
        return q["weights"] + q["live_blocks"]

    head = ["| MiB | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    return "\n".join(
        [
            f"Child process per column: `nudge run --task strategyqa --n {n} --no-report --quiet` "
            "run in-process with probes (the script's docstring says which). Resident set size "
            "(Linux VmRSS, VmHWM), MiB.",
            "",
            "**At the peak step** (the engine step whose peak is highest):",
            "",
            *head,
            row("interpreter + libraries (resident before the model loads)", size("libraries")),
            row(
                "weights (distinct parameter and buffer storages, and the linears held in "
                "oneDNN's layout at their fp32 size; LM head tied)",
                size("weights"),
            ),
            row("KV pool, resident pages (mincore)", size("pool")),
            row("… of which blocks in use at that step", size("in_use")),
            row("the rest (freed heap kept, Python objects, tokenizer, records)", size("rest")),
            row(
                "the step's own temporaries (its peak less what stays after it)", size("transient")
            ),
            row("**peak of that step**", size("step_peak")),
            row("tokens in that step's forward", lambda q, _: str(q["tokens"])),
            "",
            "**Phases, and the issue's measure** (W: weights; K: peak live KV, the most blocks in "
            "use at once):",
            "",
            *head,
            row("peak while loading the model", size("load")),
            row("peak during the needle (engine/invariance_check.py)", size("needle")),
            row("**peak of the process**", size("peak")),
            row("K: most KV blocks in use at once", size("live_blocks")),
            row("… most written KV tokens needed at once", size("live_tokens")),
            row(
                f"W + K; {RATIO} × (W + K)", lambda q, _: f"{mib(base(q))}; {mib(RATIO * base(q))}"
            ),
            row(
                "libraries + W + K (a floor of the peak)",
                lambda q, _: mib(q["libraries"] + base(q)),
            ),
            row("resident at the end of the run", lambda _, r: mib(r["end"][0])),
            row(
                "… of which garbage in reference cycles (`gc.collect`); then freed heap kept "
                "(`malloc_trim`)",
                lambda _, r: f"{mib(r['end'][0] - r['end'][1])}; {mib(r['end'][1] - r['end'][2])}",
            ),
            row("peak / (W + K)", lambda q, _: f"{q['peak'] / base(q):.2f}×"),
            row(
                "(peak − libraries) / (W + K)",
                lambda q, _: f"{(q['peak'] - q['libraries']) / base(q):.2f}×",
            ),
            row(
                "CPU s, user / system; minor page faults (not a timing)",
                lambda _, r: f"{r['cpu'][0]:.0f} / {r['cpu'][1]:.1f}; {r['cpu'][2]:,}",
            ),
            row("records.jsonl md5", lambda _, r: f"`{r['md5']}`"),
            row(
                "imported, of note",
                lambda _, r: ", ".join(r["modules"]) or "none of " + "/".join(NOTABLE[:3]),
            ),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8, help="problems of the demo (default 8)")
    parser.add_argument("--before", help="also measure this commit's code first (git archive)")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(child(options.n)))
        return
    from nudgeability.bench.results import publish

    results = {}
    if options.before:
        results[options.before] = measure(options.n, options.before)
    results["today"] = measure(options.n, None)
    publish(
        "Demo memory: where the peak goes", report(results, options.n), write=not options.no_write
    )


if __name__ == "__main__":
    main()
