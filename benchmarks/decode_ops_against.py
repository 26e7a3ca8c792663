"""P1's decode steps op by op: today's engine against an earlier commit's, self CPU seconds.

    python benchmarks/decode_ops_against.py [--old 970209c] [--no-write]

Each engine runs in a fresh process on one thread (its own code: `--old` through
bench/former.py `commit_tree`): the P1 workload (12 arms, 1,024-token prefix), a fork of one new
token and one of 48 under `torch.profiler`, after a warm-up and one timed fork of each. The
decode steps' cost of an op is its self time in the 48-token fork less the 1-token one's, so the
prefix and the suffixes' prefill cancel. Then one more fork of each length sampled from outside
by `perf` (bench/perf_samples.py), which splits the same difference by where the time fell:
in kernels, or in host time between them (the interpreter, torch's binding, libc), which the
ops' self times do not show. Where fork_vs_generate_against.py says how far the decode step is
from its floor, this says what the difference is made of. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
from pathlib import Path

from nudgeability.bench.former import run_child
from nudgeability.bench.perf_samples import RATE
from nudgeability.bench.results import publish

SHOWN = 12  # ops per table: the costliest in either engine
REPO = Path(__file__).resolve().parents[1]


def child() -> dict:
    """This process's engine: wall of each fork, and the decode steps' self seconds by op."""
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile

    try:
        from nudgeability.bench.workload import splice_workload
    except ImportError:  # an older tree keeps it beside its benchmarks
        sys.path.insert(0, str(Path.cwd() / "benchmarks"))
        from workload import splice_workload
    from nudgeability.engine import Engine, SamplingParams
    from nudgeability.models.loader import load_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    lm = load_model("smollm2")
    engine = Engine(lm.model, lm.tokenizer)

    def fork(w, new: int):
        return engine.fork(
            w.prefix, w.suffixes, SamplingParams(max_new_tokens=new, ignore_eos=True)
        )

    fork(splice_workload(lm.tokenizer, 64, 2), 4)  # warm-up
    w = splice_workload(lm.tokenizer, 1024, 12)
    # today's bench/perf_samples.py, by path: the child may run an older commit's package
    recorded = runpy.run_path(str(REPO / "bench" / "perf_samples.py"))["recorded"]
    out: dict = {"wall": {}, "ops": {}, "places": {}}
    sampled = {}
    for new in (1, 48):
        fork(w, new)
        start = time.perf_counter()
        fork(w, new)
        out["wall"][new] = time.perf_counter() - start
        with recorded() as shares:  # a fork of its own: the timed one runs unsampled
            start = time.perf_counter()
            fork(w, new)
            wall = time.perf_counter() - start
        if shares:
            sampled[new] = {place: share * wall for place, share in shares.items()}
    if len(sampled) == 2:
        out["places"] = {p: sampled[48][p] - sampled[1][p] for p in sampled[48]}
    seconds = {}
    for new in (1, 48):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fork(w, new)
        seconds[new] = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
    out["ops"] = {k: v - seconds[1].get(k, 0.0) for k, v in seconds[48].items()}
    return out


def run(commit: str | None) -> dict:
    out = run_child([str(Path(__file__).resolve()), "--child"], commit)
    return json.loads(out.strip().splitlines()[-1])


def table(today: dict, old: dict, commit: str) -> list[str]:
    a, b = today["ops"], old["ops"]
    names = sorted(set(a) | set(b), key=lambda k: -max(a.get(k, 0.0), b.get(k, 0.0)))[:SHOWN]
    rows = [f"| op | today, s | {commit}, s | difference, s |", "|---|---|---|---|"]
    for k in names:
        x, y = a.get(k, 0.0), b.get(k, 0.0)
        rows.append(f"| `{k}` | {x:.3f} | {y:.3f} | {x - y:+.3f} |")
    rest_a = sum(a.values()) - sum(a.get(k, 0.0) for k in names)
    rest_b = sum(b.values()) - sum(b.get(k, 0.0) for k in names)
    rows.append(f"| the rest | {rest_a:.3f} | {rest_b:.3f} | {rest_a - rest_b:+.3f} |")
    total_a, total_b = sum(a.values()), sum(b.values())
    rows.append(f"| all | {total_a:.3f} | {total_b:.3f} | {total_a - total_b:+.3f} |")
    return rows


def places_table(today: dict, old: dict, commit: str) -> list[str]:
    """The decode steps' seconds by where perf's samples fell (bench/perf_samples.py)."""
    a, b = today["places"], old["places"]
    if not a or not b:
        return ["No perf split: `perf` is not on this machine's PATH, or could not record."]
    rows = [f"| where | today, s | {commit}, s | difference, s |", "|---|---|---|---|"]
    for place in a:
        rows.append(f"| {place} | {a[place]:.2f} | {b[place]:.2f} | {a[place] - b[place]:+.2f} |")
    total_a, total_b = sum(a.values()), sum(b.values())
    rows.append(f"| all | {total_a:.2f} | {total_b:.2f} | {total_a - total_b:+.2f} |")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="970209c", help="the earlier commit")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child()))
        return
    today, old = run(None), run(args.old)
    walls = (
        f"Timed forks (no profiler), s: 1 new token {today['wall']['1']:.2f} today against "
        f"{old['wall']['1']:.2f}; 48 new tokens {today['wall']['48']:.2f} against "
        f"{old['wall']['48']:.2f}."
    )
    body = "\n".join(
        [
            f"`python benchmarks/decode_ops_against.py --old {args.old}`: P1's 47 decode steps "
            "(the 48-token fork less the 1-token one), self CPU seconds by op, one thread, "
            "each engine in a fresh process on its own code.",
            "",
            walls,
            "",
            *table(today, old, args.old),
            "",
            "The same decode steps by where the CPU's time fell, without a profiler inside the "
            f"process (`perf record -F {RATE}` on one more fork of each length, seconds = share "
            "× that fork's wall, the 1-token fork's subtracted): kernels are oneDNN's generated "
            "code and libtorch (MKL's GEMMs, ATen's attention and elementwise loops); the "
            "interpreter and torch's binding are host time between kernels.",
            "",
            *places_table(today, old, args.old),
        ]
    )
    publish(f"P1 decode steps op by op: today against {args.old}", body, write=not args.no_write)


if __name__ == "__main__":
    main()
