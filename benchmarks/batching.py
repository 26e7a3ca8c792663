"""The campaign's shape on CPU: bases, then arms forked from each base's cut, four ways side by side.

    python benchmarks/batching.py [--problems 64] [--arms 8] [--rows 32] [--threads 2] [--small]
        [--skip hf_batch,llama] [--section NAME]

SmolLM2-135M-Instruct fp32 on the shipped StrategyQA prompts (the with-tool prompt, rendered as a
run renders it), greedy, natural lengths (the family's stop tokens end a sequence).

1. **Bases**: one B sequence per problem, budget `--base-budget`.
2. **Arms**: for every base that closed its thinking, `--arms` arms forked from its cut (prompt +
   B's reasoning before the think-close, then each condition's splice), budget `--arm-budget`.
3. **Heavy-tailed bases**: the same prompts with per-row budgets drawn from a log-normal (median
   `--median`, sigma `--sigma`, seeded), EOS ignored: lengths no schedule can predict.

Ways: (a) the engine (continuous batching over the block pool, `--rows` rows, KV pool of the same
token slots as `--rows` rows at their whole budget); (a′) the engine without the shared start;
(c) HF `generate_batch` (paged cache, block sharing on) with that KV memory and `--rows` requests
per batch; (d) HF `generate()` in padded batches of 16 (bases only); (e) llama.cpp's `llama-server`
where it is built (benchkit/systems.py: `--rows` slots, its prompt cache, the Q4_1 GGUF: a
throughput reference on its own arithmetic, not a like-for-like ratio). Each way reports wall time,
tokens/s, mean rows per decode step against the maximum, and, where it can, peak KV against the
KV of the tokens still needed. Writes its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys

import torch
from benchkit.results import publish
from benchkit.systems import (
    LLAMA_SERVER,
    Run,
    run_engine,
    run_hf_batch,
    run_hf_padded,
    run_llama_server,
)

from nudgeability.models.loader import load_model
from nudgeability.splice.experiment.conditions import PRESETS
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.prepare import prepare

# the primary arms, then the other voices' (10 in all)
ARM_CODES = tuple(dict.fromkeys(PRESETS["primary"][2:] + PRESETS["voices"][2:]))


def workload(lm, problems: int):
    # only its prompts are read: any chunk size (a CUDA run's is otherwise its pool's rows)
    config = RunConfig(
        task="strategyqa", n=problems, conditions=("primary", "voices"), chunk_size=problems
    )
    prepared = prepare(config, loaded=lm)
    prompts = [list(p.with_tool) for p in prepared.prompts]
    return prepared.family, prompts, prepared.splices


def common_start(prompts: list[list[int]]) -> int:
    """The tokens every prompt starts with (the system prompt and tools), less one, so that each
    prompt keeps a token of its own to sample from."""
    first = prompts[0]
    n = 0
    while n < len(first) and all(len(p) > n and p[n] == first[n] for p in prompts):
        n += 1
    return max(0, min(n, min(map(len, prompts)) - 1))


def lognormal_budgets(n: int, median: int, sigma: float, cap: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [max(4, min(cap, round(median * math.exp(rng.gauss(0, sigma))))) for _ in range(n)]


def row(name: str, run: Run, max_rows: int | None, reference: Run | None) -> str:
    rows = (
        f"{statistics.mean(run.rows_per_step):.1f} / {max_rows}"
        if run.rows_per_step and max_rows
        else "—"
    )
    queued = "—"
    if run.queued_rows:
        queued = f"{statistics.mean(run.queued_rows) / max_rows:.0%}"
    kv = "—"
    if run.peak_kv_bytes is not None:
        kv = f"{run.peak_kv_bytes / 2**20:.1f} MiB"
        if run.live_at_peak_bytes:
            kv += f" vs {run.live_at_peak_bytes / 2**20:.1f} MiB live"
    same = "—"
    if reference is not None and reference is not run:
        agree = sum(a == b for a, b in zip(run.tokens, reference.tokens))
        same = f"{agree}/{len(run.tokens)}"
    return (
        f"| {name} | {run.wall:.1f} s | {run.generated / run.wall:.0f} | {rows} | {queued} | {kv} "
        f"| {same} | {run.note} |"
    )


SECTION = "Continuous batching (benchmarks/batching.py)"


def table(title: str, runs: dict[str, Run], rows: int) -> list[str]:
    engine = runs["(a) engine"]
    lines = [
        f"**{title}** ({len(engine.tokens)} sequences, {engine.generated} tokens by the engine)",
        "",
        "| way | wall | tok/s | rows per decode step / max | occupancy while queued | peak KV "
        "| same tokens as (a) | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, run in runs.items():
        lines.append(row(name, run, rows, engine))
    lines.append("")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=64)
    ap.add_argument("--arms", type=int, default=8)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--base-budget", type=int, default=256)
    ap.add_argument("--arm-budget", type=int, default=128)
    ap.add_argument("--median", type=int, default=48)
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--heavy-problems", type=int, default=128)
    ap.add_argument("--cap", type=int, default=512, help="largest heavy-tailed budget")
    ap.add_argument(
        "--skip",
        default="",
        help="ways or phases to leave out: unshared, hf_batch, hf_padded, llama, arms, heavy",
    )
    ap.add_argument(
        "--small", action="store_true", help="8 problems, 2 arms, 4 rows: a quick check"
    )
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument(
        "--section",
        default=SECTION,
        help="the RESULTS.md section to write (a partial rerun, --skip, gets its own name)",
    )
    args = ap.parse_args()
    if args.small:
        args.problems, args.arms, args.rows = 8, 2, 4
        args.base_budget, args.arm_budget, args.median = 48, 24, 12
    skip = set(filter(None, args.skip.split(",")))
    torch.set_num_threads(args.threads)
    lm = load_model("smollm2")
    model, tok = lm.model, lm.tokenizer
    family, prompts, splices = workload(lm, max(args.problems, args.heavy_problems))
    heavy_prompts, prompts = prompts[: args.heavy_problems], prompts[: args.problems]
    stops = family.stop_token_ids
    width = max(map(len, prompts))

    start = common_start(prompts + heavy_prompts)

    def ways(label, work, kv, hf_kv=None, padded=False):
        out = {}
        for name, key, run in (
            (
                "(a) engine",
                "engine",
                lambda: run_engine(model, tok, work, kv=kv, rows=args.rows, shared=start),
            ),
            (
                "(a′) engine, start not shared",
                "unshared",
                lambda: run_engine(model, tok, work, kv=kv, rows=args.rows),
            ),
            (
                "(c) HF generate_batch",
                "hf_batch",
                lambda: run_hf_batch(model, tok, work, kv=hf_kv, rows=args.rows),
            ),
            (
                "(d) HF generate(), batches of 16",
                "hf_padded",
                lambda: run_hf_padded(model, tok, work),
            ),
            (
                f"(e) llama-server, -np {args.rows}",
                "llama",
                lambda: run_llama_server(work, slots=args.rows, threads=args.threads),
            ),
        ):
            if (
                key in skip
                or (key == "hf_batch" and hf_kv is None)
                or (key == "hf_padded" and not padded)
                or (key == "llama" and not LLAMA_SERVER.is_file())
            ):
                continue
            out[name] = run()
            print(f"{label}: {name} {out[name].wall:.1f} s", file=sys.stderr, flush=True)
        return out

    # 1. bases: KV for --rows rows at their whole budget
    base_kv = args.rows * (width + args.base_budget - 1)
    bases = ("generate", prompts, [args.base_budget] * len(prompts), stops, False)
    runs1 = ways("bases", bases, base_kv, hf_kv=base_kv, padded=True)

    # 2. arms from each base's cut (the engine's bases)
    codes = ARM_CODES[: args.arms]
    groups = []
    for prompt, generated in zip(prompts, runs1["(a) engine"].tokens):
        cut = family.find_boundary(generated)
        if cut is not None:
            groups.append((prompt + generated[:cut], [list(splices[c]) for c in codes]))
    arm_budgets = [[args.arm_budget] * len(codes) for _ in groups]
    arms = ("fork", groups, arm_budgets, stops, False)
    longest = max(len(p) for p, _ in groups)
    per_group = longest + sum(len(s) + args.arm_budget - 1 for s in groups[0][1])
    arm_kv = max(1, args.rows // len(codes)) * per_group  # --rows rows' groups, prefix once
    hf_arm_kv = args.rows * (longest + max(map(len, groups[0][1])) + args.arm_budget)
    runs2 = {} if "arms" in skip else ways("arms", arms, arm_kv, hf_kv=hf_arm_kv)

    # 3. heavy-tailed bases, EOS ignored
    budgets = lognormal_budgets(len(heavy_prompts), args.median, args.sigma, cap=args.cap)
    heavy_kv = args.rows * (width + max(budgets) - 1)
    heavy = ("generate", heavy_prompts, budgets, stops, True)
    runs3 = {} if "heavy" in skip else ways("heavy", heavy, heavy_kv)

    body = report(
        args, runs1, runs2, runs3, groups, budgets, (base_kv, arm_kv, hf_arm_kv, heavy_kv), start
    )
    publish(args.section, body, write=not args.no_write)


def report(args, runs1, runs2, runs3, groups, budgets, kvs, start) -> str:
    base_kv, arm_kv, hf_arm_kv, heavy_kv = kvs
    lengths = sorted(len(t) for t in runs1["(a) engine"].tokens)
    prefix = min((len(p) for p, _ in groups), default=0)
    lines = [
        f"SmolLM2-135M-Instruct fp32, CPU, {torch.get_num_threads()} threads, StrategyQA "
        f"with-tool prompts ({prefix}+ tokens with B's reasoning), greedy. Row budget "
        f"{args.rows} for the engine and HF generate_batch. The engine's pool holds {args.rows} "
        "rows at their whole budget. HF generate_batch gets the KV "
        f"of {args.rows} requests at their whole budget (without its block sharing). The engine "
        f"stores and computes the {start} tokens every prompt starts with (system prompt and "
        "tools) once (`ForkRequest.shared`); (a′) is the engine without that.",
        "",
        f"- Bases: {args.problems} problems; lengths (the engine's) min / median / max "
        f"{lengths[0]} / {statistics.median(lengths):.0f} / {lengths[-1]}; budget "
        f"{args.base_budget}; KV {base_kv} slots.",
        f"- Arms: {len(groups)} bases closed their thinking; {args.arms} arms each, budget "
        f"{args.arm_budget}; KV {arm_kv} slots ({hf_arm_kv} for HF).",
        f"- Heavy-tailed: {args.heavy_problems} problems, per-row budgets log-normal (median "
        f"{args.median}, sigma {args.sigma}, capped at {args.cap}, seed 0; min / median / max "
        f"{min(budgets)} / {statistics.median(budgets):.0f} / {max(budgets)}), EOS ignored; KV "
        f"{heavy_kv} slots.",
        "",
    ]
    phases = (
        ("Phase 1: bases", "bases", runs1),
        (f"Phase 2: {args.arms} arms per base, forked at the cut", "arms", runs2),
        ("Heavy-tailed bases (log-normal budgets, EOS ignored)", "heavy-tailed", runs3),
    )
    for title, _, runs in phases:
        if runs:
            lines += table(title, runs, args.rows)
    lines += ["Targets (ratios of wall times in this run):", ""]

    def ratio(runs, key, engine="(a) engine"):
        return runs[key].wall / runs[engine].wall if key in runs and engine in runs else None

    def target(label, runs, key, bound):
        value = ratio(runs, key)
        if value is None:
            return f"- {label}: not run"
        verdict = "met" if value >= bound else "NOT met"
        line = f"- {label}: **{value:.2f}×** (target ≥ {bound}: **{verdict}**)"
        unshared = ratio(runs, key, "(a′) engine, start not shared")
        if unshared is not None:
            line += f"; without the shared start {unshared:.2f}×"
        return line

    lines += [
        target("engine vs HF generate_batch, bases", runs1, "(c) HF generate_batch", 2),
        target("engine vs HF generate_batch, arms", runs2, "(c) HF generate_batch", 4),
        target(
            "engine vs HF generate() in batches of 16, bases",
            runs1,
            "(d) HF generate(), batches of 16",
            1.5,
        ),
    ]
    for _, name, runs in phases:
        value = ratio(runs, f"(e) llama-server, -np {args.rows}")
        if value is not None:
            lines.append(f"- engine vs llama-server, {name} (a reference, Q4_1): {value:.2f}×")
    for _, name, runs in phases:
        run = runs.get("(a) engine")
        if run is None:
            continue
        occupancy = statistics.mean(run.queued_rows) / args.rows if run.queued_rows else None
        state = "no step had work waiting" if occupancy is None else f"{occupancy:.1%}"
        met = occupancy is not None and occupancy >= 0.9
        lines.append(
            f"- engine occupancy while work waited ({name}, {len(run.queued_rows)} steps): "
            f"{state} of {args.rows} rows (target ≥ 90%: **{'met' if met else 'NOT met'}**); "
            f"peak KV {run.peak_kv_bytes / 2**20:.1f} MiB vs {run.live_at_peak_bytes / 2**20:.1f} "
            "MiB live; at every step KV ≤ 1.15 × live + one block per row: "
            f"**{'met' if run.kv_within_target else 'NOT met'}**; preemptions {run.preemptions}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
