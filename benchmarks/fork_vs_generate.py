"""The engine's fork and its floor: Engine.fork against HF generate() per arm, HF's deepcopy
prompt-cache reuse, and the floor no implementation of the same work can beat.

    python benchmarks/fork_vs_generate.py [--arms 12] [--prefix 1024] [--new 48] [--threads 1]

SmolLM2-135M-Instruct in fp32 on CPU. All methods run the same greedy arms, side by side in one
process; the script checks that they produce the same tokens, prints the wall-time ratios b/a and
c/a beside the work-ratio bound, and writes its section of benchmarks/RESULTS.md.

The floors are measured in the same process (`benchkit/forward_floors.py`): the linear floor (HF's own forward
with no cache: the prefix in one forward, the arms' suffix tokens packed into one sequence, and
for each decode step the model on one token per arm with no past) and the attention floor (the
fused attention kernels a cascade cannot avoid, alone, on the run's shapes). The engine's figures
are split the same way: prefill, decode step, wall.
"""

from __future__ import annotations

import copy
import statistics

import torch
from benchkit.forward_floors import AttentionKernels, Round, interleaved_fork
from benchkit.results import publish
from benchkit.splice_runs import run_fork, run_hf_per_arm, timed, workload_parser
from transformers import DynamicCache

from nudgeability.costs.splice_workload import splice_workload
from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.loader import load_model


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


def _ratios(rounds: list[Round], field: str, attention: str | None) -> list[float]:
    """engine / (linear floor + `attention`: None, "attention" or "fixed"), per round."""
    out = []
    for r in rounds:
        below = getattr(r.linear, field)
        if attention is not None:
            below += getattr(getattr(r, attention), field)
        out.append(getattr(r.engine, field) / below)
    return out


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}–{max(values):.3f}]"


def _row(name: str, rounds: list[Round], field: str, unit: float) -> str:
    med = [
        statistics.median(getattr(getattr(r, part), field) for r in rounds) * unit
        for part in ("engine", "linear", "attention", "fixed")
    ]
    return (
        f"| {name} | {med[0]:.3f} | {med[1]:.3f} | {med[2]:.3f} | "
        f"{_spread(_ratios(rounds, field, None))} | "
        f"{_spread(_ratios(rounds, field, 'attention'))} | {med[3]:.3f} | "
        f"{_spread(_ratios(rounds, field, 'fixed'))} |"
    )


def main():
    ap = workload_parser(__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of engine and floors")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    lm = load_model("smollm2")
    model, tok = lm.model, lm.tokenizer
    engine = Engine(model, tok)
    w = splice_workload(tok, args.prefix, args.arms)
    n, p, s_total, c = args.arms, args.prefix, sum(len(s) for s in w.suffixes), args.new

    run_fork(engine, splice_workload(tok, 64, 2), 4)  # warm-up (allocator, first-call overheads)
    kernels = AttentionKernels(model, p, [len(s) for s in w.suffixes], c)
    params = SamplingParams(max_new_tokens=c, ignore_eos=True)
    rounds: list[Round] = []
    for r in range(args.rounds):  # each fork interleaved step by step with both floors
        rounds.append(interleaved_fork(engine, model, kernels, w.prefix, w.suffixes, params))
        if r == 0:  # HF's own ways run once, between the first and second rounds
            t_b, tok_b = timed(run_hf_per_arm, model, w, c)
            t_c, tok_c = timed(run_hf_cache_reuse, model, w, c)
    tok_a = rounds[0].tokens
    t_a = statistics.median(r.engine.wall for r in rounds)

    def med(fn):
        return statistics.median(fn(r) for r in rounds)

    wall_ratio = statistics.median(_ratios(rounds, "wall", None))
    step_ratio = statistics.median(_ratios(rounds, "step", None))
    attn_share = med(lambda r: r.attention.step / r.linear.step)
    zero_step = med(lambda r: (r.linear.step + r.attention.step) / r.linear.step)
    zero_wall = med(lambda r: (r.linear.wall + r.attention.wall) / r.linear.wall)
    fixed_step = med(lambda r: (r.linear.step + r.fixed.step) / r.linear.step)
    fixed_wall = med(lambda r: (r.linear.wall + r.fixed.wall) / r.linear.wall)

    work_a = (
        p + s_total + n * (c - 1)
    )  # one prefill, one batched suffix prefill, then decode forwards
    work_b = n * p + s_total + n * (c - 1)
    bound = work_b / work_a
    agree_b = sum(x == y for x, y in zip(tok_a, tok_b))
    agree_c = sum(x == y for x, y in zip(tok_a, tok_c))
    rows = [
        f"| (a) Engine.fork | {t_a:.2f} s (median; runs: "
        f"{', '.join(f'{r.engine.wall:.2f}' for r in rounds)}) | {work_a} | — |",
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
            f"Floors, same process, {torch.get_num_threads()} thread(s), measured interleaved "
            "with the engine step by step (`benchkit/forward_floors.py`: engine prefill, floors' "
            "prefill, then per step: engine step, linear floor step, attention kernels), in "
            f"{args.rounds} such forks; figures are medians, ratios the median of the forks' "
            "ratios [min–max]. The linear floor is HF's forward with no cache; the attention floor "
            "is the fused attention kernels a cascade must still run, alone, on the run's shapes "
            "(prefill: the packed suffix tokens against the prefix; decode: the folded arms "
            "against the prefix plus each arm against its own suffix). The fixed-shape attention "
            "is the same pieces on the shapes the engine's batch-invariant calls give them "
            "(16-row query tiles, own keys padded to whole blocks: `benchkit/forward_floors.py`).",
            "",
            "| piece | engine | linear floor | attention floor | engine / linear | "
            "engine / (linear + attention) | fixed-shape attention | "
            "engine / (linear + fixed-shape) |",
            "|---|---|---|---|---|---|---|---|",
            _row(
                f"prefill: prefix {p} + packed suffixes {s_total} tokens (s)", rounds, "prefill", 1
            ),
            _row(f"decode step, {n} rows (ms)", rounds, "step", 1000),
            _row(f"wall: prefill + {c - 1} steps (s)", rounds, "wall", 1),
            "",
            f"Linear floor pieces (median): prefix forward {med(lambda r: r.prefix):.3f} s, "
            f"packed suffixes {med(lambda r: r.suffix):.3f} s, decode {c - 1} × "
            f"{1000 * med(lambda r: r.linear.step):.1f} ms. The floor's own ratio b/floor = "
            f"{t_b / med(lambda r: r.linear.wall):.2f}× is the most this comparison could show.",
            "",
            f"- **engine wall / linear floor = {wall_ratio:.2f}** (target ≤ 1.15: "
            f"**{'met' if wall_ratio <= 1.15 else 'NOT met'}**).",
            f"- **decode step / linear floor = {step_ratio:.2f}** (target ≤ 1.1: "
            f"**{'met' if step_ratio <= 1.1 else 'NOT met'}**; rounds: "
            f"{', '.join(f'{x:.3f}' for x in _ratios(rounds, 'step', None))}). The attention "
            f"kernels alone take {attn_share:.1%} of the linear floor's step; the engine's step "
            f"exceeds the linear floor by {step_ratio - 1:.1%} in all (masks, cache writes, the "
            "merge, sampling and Python included).",
            f"- A cascade with no overhead at all, running only these attention kernels beside the "
            f"linear floor, would measure {zero_step:.3f} on the step and {zero_wall:.3f} on the "
            "wall: the least these two ratios can be on this machine with this attention kernel.",
            f"- The same with the fixed-shape calls, which every row's batch invariance needs: "
            f"{fixed_step:.3f} on the step and {fixed_wall:.3f} on the wall, the least an engine "
            "of this construction can measure here.",
        ]
    )
    publish("Fork against generate (benchmarks/fork_vs_generate.py)", body, write=not args.no_write)


if __name__ == "__main__":
    main()
