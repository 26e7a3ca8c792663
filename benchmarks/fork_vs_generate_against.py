"""P1 side by side: today's fork_vs_generate.py against an earlier commit's own, alternated, and
where today's engine spends the prefill that its floor does not.

    python benchmarks/fork_vs_generate_against.py [--old 970209c] [--rounds 2] [--old-heap-held]

Each round runs today's `benchmarks/fork_vs_generate.py --no-write` in a fresh process, then
the same script as `--old` has it, on `--old`'s own code (`git archive`, bench/former.py
`commit_tree`): the same P1 workload (12 arms, 1,024-token prefix, 48 new tokens, one thread)
and the same floors (HF's forward with no cache; the attention kernels alone), so the ratios
engine / floor of the two commits are measured minutes apart on one machine, whose speed drifts
by a fifth from hour to hour. The table reads each run's own floor table.

The floors are measured in each run's own process, so a process-wide setting of today's engine
moves its floor too: today's engine holds the C heap (util/heap.py), and HF's forward there
stops faulting its pages in again. `--old-heap-held` adds a third run a round, `--old`'s with the
same heap policy given as glibc tunables, which separates that from the engines' own work.

Then one profile (`torch.profiler`, one thread, in a fresh process) of a prefill-only fork of
the same workload (one new token) and of the whole fork (48) by today's engine, and of HF's
forward over the same prefix with no cache (the linear floor's prefix piece): self time by kind
of op. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

from nudgeability.bench.former import run_child
from nudgeability.bench.results import publish
from nudgeability.util.heap import held_heap_tunables

SCRIPT = "benchmarks/fork_vs_generate.py"
PIECES = ("prefill", "decode step", "wall")
# a floor-table row: | piece | engine | linear | attention | e/l [lo–hi] | e/(l+a) [lo–hi] |
# and, from the commit that measures the fixed-shape attention, | fixed | e/(l+f) [lo–hi] |
ROW = re.compile(
    r"^\| (prefill|decode step|wall)[^|]*\|([^|]+)\|([^|]+)\|([^|]+)\|([^|]+)\|([^|]+)\|"
    r"(?:([^|]+)\|([^|]+)\|)?"
)
KINDS = {  # profiler op names by kind
    "linear products": ("mkldnn::_linear_pointwise", "aten::mm", "aten::addmm", "aten::bmm"),
    "attention kernels": ("aten::_scaled_dot_product_flash_attention_for_cpu",),
}


def parse(text: str) -> dict:
    """The fork's median wall, b/a and the floor table's rows of one fork_vs_generate.py run."""
    out = {"fork": float(re.search(r"\(a\) Engine.fork \| ([\d.]+) s", text).group(1))}
    out["b/a"] = float(re.search(r"b/a = ([\d.]+)×", text).group(1))
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            engine, linear, attention = (float(m.group(i)) for i in (2, 3, 4))
            out[m.group(1)] = {
                "engine": engine,
                "linear": linear,
                "attention": attention,
                "over linear": float(m.group(5).split()[0]),
                "over both": float(m.group(6).split()[0]),
            }
            if m.group(7):  # the fixed-shape attention: the least this construction can show
                fixed = float(m.group(7))
                out[m.group(1)]["over fixed"] = float(m.group(8).split()[0])
                out[m.group(1)]["least fixed"] = (linear + fixed) / linear
    missing = [p for p in PIECES if p not in out]
    if missing:
        raise RuntimeError(f"{SCRIPT}: no floor rows {missing} in its output:\n{text[-2000:]}")
    return out


def run(commit: str | None, env: dict[str, str] | None = None) -> dict:
    """One fork_vs_generate.py run: today's, or `commit`'s script on its own code."""
    return parse(run_child([SCRIPT, "--no-write"], commit, env))


def profile_child() -> dict:
    """Self seconds by kind of op: today's prefill-only fork, HF's forward over the prefix."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from nudgeability.bench.workload import run_fork, splice_workload
    from nudgeability.engine import Engine
    from nudgeability.models.loader import load_model

    torch.set_num_threads(1)
    lm = load_model("smollm2")
    engine = Engine(lm.model, lm.tokenizer)
    w = splice_workload(lm.tokenizer, 1024, 12)
    prefix = torch.tensor([w.prefix])
    jobs = {
        "engine: prefill-only fork": lambda: run_fork(engine, w, 1),
        "engine: the whole fork (48 new tokens)": lambda: run_fork(engine, w, 48),
        "HF forward over the prefix": lambda: lm.model(prefix, use_cache=False),
    }
    result = {}
    with torch.inference_mode():
        for name, job in jobs.items():
            job()  # warm-up
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                job()
            by_op = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
            kinds = {k: sum(by_op.get(op, 0.0) for op in ops) for k, ops in KINDS.items()}
            kinds["the rest"] = sum(by_op.values()) - sum(kinds.values())
            result[name] = kinds
    return result


def profiled() -> dict:
    out = run_child([str(Path(__file__).resolve()), "--profile-child"], None)
    return json.loads(out.strip().splitlines()[-1])


def report(runs: dict[str, list[dict]], profile: dict, old: str) -> str:
    def med(name, fn):
        return statistics.median(fn(r) for r in runs[name])

    def cells(name, fn, fmt):
        try:
            values = [fn(r) for r in runs[name]]
        except KeyError:  # a commit's script that does not measure it
            return "—"
        return f"{fmt.format(statistics.median(values))} ({', '.join(map(fmt.format, values))})"

    names = list(runs)
    lines = [
        f"`{SCRIPT} --no-write` of today and of {old} (its own script and code), alternated "
        f"round by round, {len(runs[names[0]])} rounds, each a fresh process; each run's figures "
        "are its own medians over its 3 interleaved forks; cells: median (rounds). "
        f"*{old}, heap held*: {old}'s run with today's heap policy given as glibc tunables "
        f"(`GLIBC_TUNABLES={held_heap_tunables()}`, util/heap.py), as today's engine sets it "
        "for its own process and so for the floor measured there. "
        "(linear + fixed-shape attention) / linear floor: what an engine doing nothing but the "
        "linear floor's work and the fixed-shape attention calls would measure "
        "(bench/floor.py), from the run's medians; — where the commit does not measure it.",
        "",
        "| figure | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
        "| (a) Engine.fork, s | "
        + " | ".join(cells(n, lambda r: r["fork"], "{:.2f}") for n in names)
        + " |",
        "| b/a | " + " | ".join(cells(n, lambda r: r["b/a"], "{:.2f}") for n in names) + " |",
    ]
    for piece in PIECES:
        for key, label in (
            ("over linear", "engine / linear floor"),
            ("over both", "engine / (linear + attention)"),
            ("over fixed", "engine / (linear + fixed-shape attention)"),
            ("least fixed", "(linear + fixed-shape attention) / linear floor"),
        ):
            lines.append(
                f"| {piece}: {label} | "
                + " | ".join(cells(n, lambda r, p=piece, k=key: r[p][k], "{:.3f}") for n in names)
                + " |"
            )
    lines.append(
        "| prefill: engine, s | "
        + " | ".join(cells(n, lambda r: r["prefill"]["engine"], "{:.2f}") for n in names)
        + " |"
    )
    kinds = [*KINDS, "the rest"]
    lines += [
        "",
        "Profile, one thread, self CPU seconds (`torch.profiler`; a profiled run is slower than "
        "a timed one):",
        "",
        "| s | " + " | ".join(kinds) + " | all |",
        "|---|" + "---|" * (len(kinds) + 1),
        *(
            f"| {name} | "
            + " | ".join(f"{k[kind]:.2f}" for kind in kinds)
            + f" | {sum(k.values()):.2f} |"
            for name, k in profile.items()
        ),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="970209c", help="the earlier commit (default 970209c)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--old-heap-held",
        action="store_true",
        help="also run --old with today's heap policy (glibc tunables): a third column",
    )
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md")
    parser.add_argument("--profile-child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.profile_child:
        print(json.dumps(profile_child()))
        return
    held = f"{options.old}, heap held"
    runs: dict[str, list[dict]] = {"today": [], options.old: []}
    if options.old_heap_held:
        runs[held] = []
    for _ in range(options.rounds):
        runs["today"].append(run(None))
        runs[options.old].append(run(options.old))
        if options.old_heap_held:
            runs[held].append(run(options.old, {"GLIBC_TUNABLES": held_heap_tunables()}))
    publish(
        f"P1 side by side: today against {options.old}",
        report(runs, profiled(), options.old),
        write=not options.no_write,
    )


if __name__ == "__main__":
    main()
