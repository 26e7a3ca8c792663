"""The demo's memory with the default's forked workers: the whole process tree's peak against
the weights (held once: the workers share them) plus every worker's peak live KV.

    python benchmarks/workers_memory.py              # the demo (n = 8); writes its section
    python benchmarks/workers_memory.py --no-write   # print only

Two child processes, one per column: `nudge run --task strategyqa --n N --no-report --quiet
--out TMP` run in-process as `nudge run` defaults (one forked worker per usable core,
splice/run/workers.py), then with `--workers 1` (one process). Each carries the probes of
benchkit/demo_probes.py (the model's load, the needle, every step of the run's engine). A forked worker inherits
them: at the fork it starts its own list of steps (`os.register_at_fork`), and each time its
shard's run returns it writes that list to a file, so the parent reads every worker's pool
blocks in use, step by step.

A forked worker's pages are its parent's until one of them writes to a page, so resident
sizes (RSS) count the shared weights once per process. The measure is the proportional set
size (PSS, /proc/PID/smaps_rollup: a page shared by k processes counts 1/k in each), summed
over the tree and sampled every 0.1 s by this script, outside the run. Against it: the
libraries (the parent's resident size before the model loads, shared by the workers), W (the
weights, once) and K (the sum over the workers of each one's most KV blocks in use at once,
an upper bound on the tree's live KV: the workers' peaks need not coincide). Memory does not
depend on what else the machine runs, so no timing is taken.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchkit.child_memory import tree_peaks
from benchkit.demo_probes import RATIO, Probe, install, mib, weight_bytes
from benchkit.results import publish


# ---- the child ---------------------------------------------------------------------------------
def child(n: int, workers: str, dump: Path) -> dict:
    import torch  # noqa: F401  (imported by the CLI too: the libraries' share, not the run's)

    import nudgeability.splice.run.runner as runner
    from nudgeability.cli import main
    from nudgeability.costs.memory import reset_peak

    probe = Probe()
    install(probe)
    parent = os.getpid()

    def in_worker() -> None:  # a forked worker's own steps, from its own peak
        probe.steps, probe.best, probe.engine = [], 0, None
        reset_peak()

    os.register_at_fork(after_in_child=in_worker)

    def written(inner):
        def run(*args, **kwargs):
            out = inner(*args, **kwargs)
            if os.getpid() != parent:  # a worker ends in os._exit: write its steps now
                (dump / f"worker-{os.getpid()}.json").write_text(json.dumps(probe.steps))
            return out

        return run

    runner._streamed = written(runner._streamed)
    runner._by_unit = written(runner._by_unit)
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["run", "--task", "strategyqa", "--n", str(n), "--no-report", "--quiet"]
        argv += ["--workers", workers] if workers != "default" else []
        code = main([*argv, "--out", str(Path(tmp) / "run")])
        if code:
            raise SystemExit(f"nudge run exited {code}")
    steps = [json.loads(p.read_text()) for p in sorted(dump.glob("worker-*.json"))]
    if os.getpid() == parent and not steps:  # one process: its own steps
        steps = [probe.steps]
    phases = {p["phase"]: p for p in probe.phases}
    return {
        "libraries": phases["libraries"]["VmRSS"],
        "weights": weight_bytes(probe.model),
        "live_blocks": [max(s["in_use"] for s in worker) for worker in steps],
        "peaks": [max(s["peak"] for s in worker) for worker in steps],
    }


# ---- the parent --------------------------------------------------------------------------------
def measure(n: int, workers: str) -> dict:
    """One child, its tree's peak PSS and RSS sampled from outside."""
    with tempfile.TemporaryDirectory() as dump:
        command = [sys.executable, __file__, "--child", "--n", str(n), "--workers", workers]
        proc = subprocess.Popen(
            [*command, "--dump", dump], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        peaks = tree_peaks(proc, 0.1)
        out, err = proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"the child ({workers}) failed:\n{err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    return {**result, **peaks}


def report(results: dict[str, dict], n: int) -> str:
    names = list(results)

    def row(label, cell) -> str:
        return f"| {label} | " + " | ".join(cell(results[name]) for name in names) + " |"

    def base(r) -> int:  # W + K
        return r["weights"] + sum(r["live_blocks"])

    return "\n".join(
        [
            f"Child process per column: `nudge run --task strategyqa --n {n} --no-report --quiet` "
            "in-process with benchkit/demo_probes.py's probes, inherited by the forked workers (the "
            "script's docstring says how). MiB.",
            "",
            "| MiB | " + " | ".join(names) + " |",
            "|---|" + "---|" * len(names),
            row(
                "processes in the tree (the parent and its workers)", lambda r: str(r["processes"])
            ),
            row(
                "interpreter + libraries (the parent, before the model loads)",
                lambda r: mib(r["libraries"]),
            ),
            row("W: weights, held once", lambda r: mib(r["weights"])),
            row(
                "each worker's most KV blocks in use at once",
                lambda r: ", ".join(mib(k) for k in r["live_blocks"]),
            ),
            row("K: their sum", lambda r: mib(sum(r["live_blocks"]))),
            row(f"W + K; {RATIO} × (W + K)", lambda r: f"{mib(base(r))}; {mib(RATIO * base(r))}"),
            row(
                "each worker's own peak RSS (shared pages included)",
                lambda r: ", ".join(mib(p) for p in r["peaks"]),
            ),
            row(
                "peak of the tree, RSS summed (shared pages once per process)",
                lambda r: mib(r["rss"]),
            ),
            row("**peak of the tree, PSS summed**", lambda r: mib(r["pss"])),
            row("… processes alive at that peak", lambda r: str(r["at_peak"])),
            row("PSS peak / (W + K)", lambda r: f"{r['pss'] / base(r):.2f}×"),
            row(
                "**(PSS peak − libraries) / (W + K)**",
                lambda r: f"{(r['pss'] - r['libraries']) / base(r):.2f}×",
            ),
            "",
            *(
                f"- {name}: (PSS peak − libraries) / (W + K) = "
                f"{(r['pss'] - r['libraries']) / base(r):.2f}× (target ≤ {RATIO}×: "
                f"{'met' if r['pss'] - r['libraries'] <= RATIO * base(r) else '**NOT met**'})"
                for name, r in results.items()
            ),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8, help="problems of the demo (default 8)")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workers", default="default", help=argparse.SUPPRESS)
    parser.add_argument("--dump", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(child(options.n, options.workers, options.dump)))
        return
    results = {
        "default (forked workers)": measure(options.n, "default"),
        "--workers 1": measure(options.n, "1"),
    }
    publish(
        "Demo memory: the default's forked workers (benchmarks/workers_memory.py)",
        report(results, options.n),
        write=not options.no_write,
    )


if __name__ == "__main__":
    main()
