"""The campaign's shape on CPU: bases, then arms forked from each base's cut, four ways side by side.

    python benchmarks/campaign.py [--problems 64] [--arms 8] [--rows 32] [--threads 2] [--small]

SmolLM2-135M-Instruct fp32 on the shipped StrategyQA prompts (the with-tool prompt, rendered as a
run renders it), greedy, natural lengths (the family's stop tokens end a sequence).

1. **Bases**: one B sequence per problem, budget `--base-budget`.
2. **Arms**: for every base that closed its thinking, `--arms` arms forked from its cut (prompt +
   B's reasoning before the think-close, then each condition's splice), budget `--arm-budget`.
3. **Heavy-tailed bases**: the same prompts with per-row budgets drawn from a log-normal (median
   `--median`, sigma `--sigma`, seeded), EOS ignored: lengths no schedule can predict.

Ways: (a) the engine (continuous batching over the block pool, `--rows` rows, KV pool of the same
token slots as (b)); (b) the engine's former static batching: its own code from git
(`_former_engine.py`), under a KV budget that holds `--rows` rows at their whole budget; (c) HF
`generate_batch` (paged cache, block sharing on) with that KV memory and `--rows` requests per
batch; (d) HF `generate()` in padded batches of 16 (bases only). Each way reports wall time,
tokens/s, mean rows per decode step against the maximum, and, where it can, peak KV against the
KV of the tokens still needed. Writes its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics

import torch
from _campaign_systems import Run, run_engine, run_former, run_hf_batch, run_hf_padded
from _former_engine import FORMER_COMMIT, load_former_engine
from _results import write_section

from nudgeability.models.loader import load_model
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.prepare import prepare

ARM_CODES = (
    "empty",
    "conf",
    "doubt",
    "neutral",
    "conf_second",
    "doubt_second",
    "conf_reviewer",
    "doubt_reviewer",
    "conf_expert",
    "doubt_expert",
)


def workload(lm, problems: int):
    prepared = prepare(
        RunConfig(task="strategyqa", n=problems, conditions=("primary", "voices")), loaded=lm
    )
    prompts = [list(p.with_tool) for p in prepared.prompts]
    return prepared.family, prompts, prepared.splices


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
    if run.queued_steps:
        steps = run.rows_per_step[: run.queued_steps]
        queued = f"{statistics.mean(steps) / max_rows:.0%}"
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
    ap.add_argument("--skip", default="", help="ways to leave out, e.g. hf_batch_arms,hf_padded")
    ap.add_argument(
        "--small", action="store_true", help="8 problems, 2 arms, 4 rows: a quick check"
    )
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.small:
        args.problems, args.arms, args.rows = 8, 2, 4
        args.base_budget, args.arm_budget, args.median = 48, 24, 12
    skip = set(filter(None, args.skip.split(",")))
    torch.set_num_threads(args.threads)
    lm = load_model("smollm2")
    model, tok = lm.model, lm.tokenizer
    family, prompts, splices = workload(lm, args.problems)
    stops = family.stop_token_ids
    former = load_former_engine()
    width = max(map(len, prompts))
    base_kv = args.rows * (width + args.base_budget - 1)  # the former batches hold --rows rows

    # 1. bases
    bases = ("generate", prompts, [args.base_budget] * len(prompts), stops, False)
    runs1 = {"(a) engine": run_engine(model, tok, bases, kv=base_kv, rows=args.rows)}
    runs1["(b) former static"] = run_former(former, model, tok, bases, kv=base_kv)
    if "hf_batch" not in skip:
        runs1["(c) HF generate_batch"] = run_hf_batch(model, tok, bases, kv=base_kv, rows=args.rows)
    if "hf_padded" not in skip:
        runs1["(d) HF generate(), batches of 16"] = run_hf_padded(model, tok, bases)

    # 2. arms from each base's cut (the engine's bases)
    codes = ARM_CODES[: args.arms]
    groups = []
    for prompt, generated in zip(prompts, runs1["(a) engine"].tokens):
        cut = family.find_boundary(generated)
        if cut is not None:
            groups.append((prompt + generated[:cut], [list(splices[c]) for c in codes]))
    arm_budgets = [[args.arm_budget] * len(codes) for _ in groups]
    arms = ("fork", groups, arm_budgets, stops, False)
    per_group = max(len(p) for p, _ in groups) + sum(
        len(s) + args.arm_budget - 1 for s in groups[0][1]
    )
    arm_kv = max(1, args.rows // len(codes)) * per_group
    runs2 = {"(a) engine": run_engine(model, tok, arms, kv=arm_kv, rows=args.rows)}
    runs2["(b) former static"] = run_former(former, model, tok, arms, kv=arm_kv)
    if "hf_batch" not in skip and "hf_batch_arms" not in skip:
        runs2["(c) HF generate_batch"] = run_hf_batch(model, tok, arms, kv=arm_kv, rows=args.rows)

    # 3. heavy-tailed bases, EOS ignored
    budgets = lognormal_budgets(len(prompts), args.median, args.sigma, cap=4 * args.base_budget)
    heavy_kv = args.rows * (width + max(budgets) - 1)
    heavy = ("generate", prompts, budgets, stops, True)
    runs3 = {"(a) engine": run_engine(model, tok, heavy, kv=heavy_kv, rows=args.rows)}
    runs3["(b) former static"] = run_former(former, model, tok, heavy, kv=heavy_kv)

    body = report(args, runs1, runs2, runs3, groups, budgets, base_kv, arm_kv, heavy_kv)
    print(body)
    if not args.no_write:
        write_section("Campaign: continuous batching (benchmarks/campaign.py)", body)


def report(args, runs1, runs2, runs3, groups, budgets, base_kv, arm_kv, heavy_kv) -> str:
    engine = [r["(a) engine"] for r in (runs1, runs2, runs3)]
    lengths = sorted(len(t) for t in engine[0].tokens)
    lines = [
        f"SmolLM2-135M-Instruct fp32, CPU, {torch.get_num_threads()} threads, {args.problems} "
        f"StrategyQA problems (with-tool prompts of {min(map(len, [g[0] for g in groups]), default=0)}"
        f"+ tokens), greedy. Row budget {args.rows}. The former static batching is the engine's "
        f"own code at git {FORMER_COMMIT} (`benchmarks/_former_engine.py`), not an imitation; "
        f"its KV budget (`max_batch_tokens`) holds {args.rows} rows at their whole budget, and "
        "the engine's pool has the same token slots. HF generate_batch gets that KV memory and "
        f"{args.rows} requests per batch.",
        "",
        f"Base lengths (the engine's) min / median / max: {lengths[0]} / "
        f"{statistics.median(lengths):.0f} / {lengths[-1]}; budget {args.base_budget}; KV budget "
        f"{base_kv} slots. Arms: {len(groups)} bases closed their thinking, {args.arms} arms "
        f"each, budget {args.arm_budget}, KV budget {arm_kv} slots. Heavy-tailed: per-row budgets "
        f"log-normal (median {args.median}, sigma {args.sigma}, seed 0; min / median / max "
        f"{min(budgets)} / {statistics.median(budgets):.0f} / {max(budgets)}), EOS ignored, KV "
        f"budget {heavy_kv} slots.",
        "",
        *table("Phase 1: bases", runs1, args.rows),
        *table(f"Phase 2: {args.arms} arms per base, forked at the cut", runs2, args.rows),
        *table("Heavy-tailed bases (log-normal budgets, EOS ignored)", runs3, args.rows),
        "Targets (ratios of wall times in this run):",
        "",
    ]

    def ratio(runs, key):
        return runs[key].wall / runs["(a) engine"].wall if key in runs else None

    def target(label, value, bound):
        if value is None:
            return f"- {label}: not run"
        return f"- {label}: **{value:.2f}×** (target ≥ {bound}: **{'met' if value >= bound else 'NOT met'}**)"

    lines += [
        target("engine vs former static, heavy-tailed", ratio(runs3, "(b) former static"), 1.5),
        target("engine vs HF generate_batch, bases", ratio(runs1, "(c) HF generate_batch"), 2),
        target("engine vs HF generate_batch, arms", ratio(runs2, "(c) HF generate_batch"), 4),
        target(
            "engine vs HF generate() in batches of 16, bases",
            ratio(runs1, "(d) HF generate(), batches of 16"),
            1.5,
        ),
        "- engine vs former static, natural lengths: bases "
        f"{ratio(runs1, '(b) former static'):.2f}×, arms {ratio(runs2, '(b) former static'):.2f}×",
    ]
    for name, run in zip(("bases", "arms", "heavy-tailed"), engine):
        steps = run.rows_per_step[: run.queued_steps] if run.queued_steps else []
        occupancy = statistics.mean(steps) / args.rows if steps else None
        state = "no step had work waiting" if occupancy is None else f"{occupancy:.1%}"
        met = occupancy is not None and occupancy >= 0.9
        lines.append(
            f"- engine occupancy while work waited ({name}, {run.queued_steps or 0} steps): "
            f"{state} of {args.rows} rows (target ≥ 90%: **{'met' if met else 'NOT met'}**); "
            f"peak KV {run.peak_kv_bytes / 2**20:.1f} MiB vs {run.live_at_peak_bytes / 2**20:.1f} "
            "MiB live; at every step KV ≤ 1.15 × live + one block per row: "
            f"**{'met' if run.kv_within_target else 'NOT met'}**; preemptions {run.preemptions}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
