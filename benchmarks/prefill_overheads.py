"""P1's prefill beyond its kernels: today's engine against an earlier commit's (default 970209c),
each in a fresh process, as glibc's malloc comes and with it keeping freed memory.

    python benchmarks/prefill_overheads.py [--old 970209c] [--forks 3] [--no-write]

Each variant is one child process, on one torch thread: it loads SmolLM2 and times HF's own
forward with no cache over P1's tokens (`bench.workload.splice_workload`: the 1,024-token prefix,
then the 12 arms' suffixes packed into one sequence: the linear floor's prefill piece,
`fork_vs_generate.py`), then the engine's prefill-only forks of the same workload (one new
token), then HF's forward again, `--forks` timed times each after one warm-up. For each it takes the wall, the minor page faults
and the user and system CPU seconds (`getrusage`); where Linux `perf` can record the child, a
sample of the engine's timed forks split by where the samples fell: the kernels (oneDNN's
generated code, `[JIT]`, and libtorch: MKL's GEMMs inside the attention, the elementwise ops),
the OS kernel (the page faults: zeroing fresh pages), libc (malloc and free), the interpreter and
torch's Python binding. `--old` runs the commit's own code (`git archive`, bench/former.py
`commit_tree`); both have the same `run_fork` and `splice_workload`.

The second pair of variants gives the child util/heap.py's held heap as glibc tunables
(`held_heap_tunables`: the mmap threshold pinned at 32 MiB, the trim threshold at 2 GiB, in
GLIBC_TUNABLES): glibc then serves every temporary of these sizes from its
heap and keeps what is freed, instead of mapping fresh pages for the large ones and returning
the heap's top to the OS, which the next temporary faults back in. It is a setting of the
process: HF's forward in the same process gets it too. Today's engine holds its heap so itself
(util/heap.py `hold_freed_heap`, when its model runner starts), so for today the pair measures
one policy twice, set once by the environment and once by the engine; for the older commit it
is the difference the setting makes.

Last, in each child: the operator calls of one prefill-only fork (torch.profiler), and the
cost of one call where the arithmetic is nothing (a [16, 16] product: oneDNN's matmul as the
invariant products call it, and `F.linear`). Run it alone.
"""

from __future__ import annotations

import argparse
import json
import resource
import runpy
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _usage() -> tuple[float, float, float, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), r.ru_utime, r.ru_stime, r.ru_minflt


def _measured(run, times: int) -> dict:
    """Wall, user, system seconds and minor faults of each of `times` calls of `run`."""
    got = []
    for _ in range(times):
        a = _usage()
        run()
        b = _usage()
        got.append(
            {"wall": b[0] - a[0], "user": b[1] - a[1], "sys": b[2] - a[2], "faults": b[3] - a[3]}
        )
    return {key: statistics.median(g[key] for g in got) for key in got[0]}


def _recorded():
    # today's bench/perf_samples.py, by path: the child may run an older commit's package
    return runpy.run_path(str(REPO / "bench" / "perf_samples.py"))["recorded"]()


def child(forks: int) -> dict:
    """One variant's measures, in this process (the variant's code is what `nudgeability` is)."""
    import torch

    from nudgeability.bench.workload import run_fork, splice_workload
    from nudgeability.engine import Engine
    from nudgeability.models.loader import load_model

    torch.set_num_threads(1)
    lm = load_model("smollm2")
    w = splice_workload(lm.tokenizer, 1024, 12)
    prefix = torch.tensor([w.prefix])
    packed = torch.tensor([[t for s in w.suffixes for t in s]])
    out: dict = {}

    def floor() -> None:
        lm.model(prefix, use_cache=False)
        lm.model(packed, use_cache=False)

    with torch.inference_mode():
        floor()
        out["floor before"] = _measured(floor, forks)
        engine = Engine(lm.model, lm.tokenizer)
        run_fork(engine, w, 1)
        with _recorded() as split:  # perf samples of the timed forks (bench/perf_samples.py)
            out["engine"] = _measured(lambda: run_fork(engine, w, 1), forks)
        if split:
            out["split"] = split
        out["floor after"] = _measured(floor, forks)
        out["ops"] = _op_counts(lambda: run_fork(engine, w, 1))
    out["call"] = _call_cost(torch)
    return out


PRODUCTS = ("mkldnn::_linear_pointwise", "aten::mm", "aten::addmm", "aten::bmm")


def _op_counts(run) -> dict[str, int]:
    """Operator calls of one `run()` under torch.profiler: all of them (nested ones too) and the
    matrix products' kernel calls."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    names = [e.name for e in prof.events()]
    return {"all": len(names), "products": sum(n in PRODUCTS for n in names)}


def _call_cost(torch) -> dict[str, float]:
    """Microseconds per call, on one [16, 16] x [16, 16] product where the arithmetic is nothing:
    oneDNN's matmul as the invariant products call it (on a reordered weight) and `F.linear`."""
    import timeit

    x, weight = torch.randn(16, 16), torch.randn(16, 16)
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, 16)
    calls = {
        "onednn": lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""),
        "F.linear": lambda: torch.nn.functional.linear(x, weight),
    }
    return {
        name: 1e6 * min(timeit.repeat(call, number=2000, repeat=5)) / 2000
        for name, call in calls.items()
    }


def keep_freed_env() -> dict[str, str]:
    """The `keep freed` variants' environment (imported here, in the parent: a child may run an
    older commit's package, which lacks it)."""
    from nudgeability.util.heap import held_heap_tunables

    return {"GLIBC_TUNABLES": held_heap_tunables()}


def variant(commit: str | None, keep_freed: bool, forks: int) -> dict:
    from nudgeability.bench.former import run_child

    args = [str(Path(__file__).resolve()), "--child", "--forks", str(forks)]
    out = run_child(args, commit, keep_freed_env() if keep_freed else None)
    return json.loads(out.strip().splitlines()[-1])


def report(rows: list[tuple[str, dict]], forks: int) -> str:
    lines = [
        f"Each variant a fresh process, one torch thread: HF's forward with no cache over the "
        "prefix and the packed suffixes (the linear floor's prefill piece), then the engine's "
        f"prefill-only forks of P1's workload (1,024-token prefix, 12 arms, one new token), then "
        f"HF's forward again, each {forks} timed times after one warm-up; medians. `keep freed`: "
        f"GLIBC_TUNABLES={keep_freed_env()['GLIBC_TUNABLES']} in the child's environment (util/heap.py "
        "`held_heap_tunables`). An engine that holds "
        "its heap itself (util/heap.py `hold_freed_heap`, when its model runner starts) runs "
        "with that policy in both of its rows, and its HF floor before the engine without it.",
        "",
        "| variant | engine prefill, s | HF floor before the engine, s | HF floor after it, s | "
        "engine / floor before | page faults per prefill: engine; floor before; after "
        "| engine's user, system s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in rows:
        e, b, a = r["engine"], r["floor before"], r["floor after"]
        lines.append(
            f"| {name} | {e['wall']:.2f} | {b['wall']:.2f} | {a['wall']:.2f} | "
            f"{e['wall'] / b['wall']:.3f} | {e['faults']:,.0f}; {b['faults']:,.0f}; "
            f"{a['faults']:,.0f} | {e['user']:.2f}, {e['sys']:.2f} |"
        )
    call = rows[0][1]["call"]
    lines += [
        "",
        "Operator calls in one prefill-only fork (torch.profiler, nested calls counted): "
        + "; ".join(
            f"{name}: {r['ops']['all']:,} in all, {r['ops']['products']:,} matrix-product kernel "
            "calls"
            for name, r in rows
            if "keep freed" not in name
        )
        + f". One call on a [16, 16] × [16, 16] product, where the arithmetic is nothing: "
        f"oneDNN's matmul {call['onednn']:.1f} µs, `F.linear` {call['F.linear']:.1f} µs.",
    ]
    split = [(name, r) for name, r in rows if "split" in r]
    if split:
        from nudgeability.bench.perf_samples import PLACES

        places = [*PLACES, "other"]
        lines += [
            "",
            "Where the engine's prefill went (`perf record -F 499` on the timed forks, samples by "
            "shared object; seconds = share × the median prefill):",
            "",
            "| variant | " + " | ".join(places) + " |",
            "|---|" + "---|" * len(places),
        ]
        for name, r in split:
            wall = r["engine"]["wall"]
            cells = [f"{wall * r['split'][p]:.2f} s ({r['split'][p]:.0%})" for p in places]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    else:
        lines += ["", "No perf split: `perf` is not on this machine's PATH, or could not record."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="970209c", help="the earlier commit (default 970209c)")
    parser.add_argument("--forks", type=int, default=3, help="timed prefills per variant")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(child(options.forks)))
        return
    from nudgeability.bench.results import publish

    rows = []
    for keep_freed in (False, True):
        for commit in (None, options.old):
            name = f"{'today' if commit is None else commit}{', keep freed' if keep_freed else ''}"
            rows.append((name, variant(commit, keep_freed, options.forks)))
            print(f"{name}: done", file=sys.stderr)
    publish(
        f"P1 prefill: where today's engine spends beyond its kernels, against {options.old}",
        report(rows, options.forks),
        write=not options.no_write,
    )


if __name__ == "__main__":
    main()
