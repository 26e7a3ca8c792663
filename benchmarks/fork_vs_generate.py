"""P1/P2 and the engine's floor: Engine.fork against HF generate() per arm, HF's deepcopy
prompt-cache reuse, and the floor no implementation of the same work can beat.

    python benchmarks/fork_vs_generate.py [--arms 12] [--prefix 1024] [--new 48] [--threads 1]

SmolLM2-135M-Instruct in fp32 on CPU. All methods run the same greedy arms, side by side in one
process; the script checks that they produce the same tokens, prints the wall-time ratios b/a and
c/a beside the work-ratio bound, and writes its section of benchmarks/RESULTS.md.

The floor is measured in the same process with HF's own forward and no cache at all: the prefix
in one forward, the arms' suffix tokens packed into one sequence (no padding), and for each decode
step the model on one token for each of the arms with no past (embeddings, linear layers, norms,
LM head: everything but attention over the cache). Each piece is timed best of `--repeats`.
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


def floor_pieces(model, w, repeats: int) -> dict[str, float]:
    """Best-of-`repeats` seconds of the floor's three pieces (see the module docstring)."""
    prefix = torch.tensor([w.prefix])
    packed = torch.tensor([[t for s in w.suffixes for t in s]])
    rows = torch.tensor([[s[-1]] for s in w.suffixes])
    out = {}
    with torch.inference_mode():
        for name, ids in (("prefix", prefix), ("suffix", packed), ("step", rows)):
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                model(input_ids=ids, use_cache=False, logits_to_keep=1)
                best = min(best, time.perf_counter() - t0)
            out[name] = best
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
    ap.add_argument("--repeats", type=int, default=5, help="best-of for each floor piece")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    lm = load_model("smollm2")
    model, tok = lm.model, lm.tokenizer
    engine = Engine(model, tok)
    w = splice_workload(tok, args.prefix, args.arms)
    n, p, s_total, c = args.arms, args.prefix, sum(len(s) for s in w.suffixes), args.new

    run_fork(engine, splice_workload(tok, 64, 2), 4)  # warm-up (allocator, first-call overheads)
    engine.stats = type(engine.stats)()
    t_a1, tok_a = timed(run_fork, engine, w, c)
    decode_a1 = engine.stats.decode_seconds
    floor = floor_pieces(model, w, args.repeats)
    t_b, tok_b = timed(run_hf_per_arm, model, w, c)
    t_c, tok_c = timed(run_hf_cache_reuse, model, w, c)
    engine.stats = type(engine.stats)()
    t_a2, _ = timed(run_fork, engine, w, c)
    step_a = min(decode_a1, engine.stats.decode_seconds) / (c - 1)
    t_a = min(t_a1, t_a2)
    t_floor = floor["prefix"] + floor["suffix"] + (c - 1) * floor["step"]

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
            "",
            f"Floor, same process, HF forward with no cache, best of {args.repeats}, "
            f"{torch.get_num_threads()} thread(s):",
            "",
            "| piece | seconds |",
            "|---|---|",
            f"| prefix, one forward of {p} tokens | {floor['prefix']:.3f} |",
            f"| suffixes, packed into one forward of {s_total} tokens | {floor['suffix']:.3f} |",
            f"| decode: {c - 1} steps × the model on {n} rows, no past ({floor['step'] * 1000:.1f} ms) "
            f"| {(c - 1) * floor['step']:.3f} |",
            f"| **floor** | **{t_floor:.3f}** |",
            "",
            f"- **engine wall / floor = {t_a / t_floor:.2f}** (target ≤ 1.15: "
            f"**{'met' if t_a / t_floor <= 1.15 else 'NOT met'}**); the floor's own ratio b/floor = "
            f"{t_b / t_floor:.2f}× is the most P1 could show.",
            f"- **decode step / linear floor = {step_a / floor['step']:.2f}** ({step_a * 1000:.1f} ms vs "
            f"{floor['step'] * 1000:.1f} ms; target ≤ 1.1: "
            f"**{'met' if step_a / floor['step'] <= 1.1 else 'NOT met'}**).",
        ]
    )
    print(body)
    if not args.no_write:
        write_section("P1/P2 fork vs generate (benchmarks/fork_vs_generate.py)", body)


if __name__ == "__main__":
    main()
