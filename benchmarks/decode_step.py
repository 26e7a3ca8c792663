"""The decode step, lean enough for a GPU: aten operations and host time per step against HF's own
step, and where the time of a real step goes.

    python benchmarks/decode_step.py [--threads 1] [--steps 20]

1. **Operations per step** on a tiny Llama (hidden 64) with 2 and 4 layers, where compute is
   negligible and the count is what a GPU would launch: the engine's step against HF's step on a
   `DynamicCache` already expanded to the arms (HF pays no prefix sharing). Counts are exact and
   deterministic (`nudgeability.bench.profile`); views (which launch no kernel) are counted apart.
   Host time per step on the same tiny model, best of `--steps`.
2. **Profile of one decode step on the P1 workload** (SmolLM2-135M fp32, 12 arms, 1,024-token
   prefix, suffixes of 10-30 tokens): self CPU time by operation, from `torch.profiler`.

Writes its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import collections
import time

import torch
from torch.profiler import ProfilerActivity, profile

from nudgeability.bench.profile import engine_step_ops, hf_expanded_decode, hf_step_ops
from nudgeability.bench.results import publish
from nudgeability.bench.workload import splice_workload
from nudgeability.engine import Engine, ForkRequest, SamplingParams
from nudgeability.models.testing.tiny import tiny_model

ARMS = (3, 7, 12, 5)


def tiny_case(layers: int):
    model = tiny_model("llama", num_layers=layers)
    prefix = list(range(3, 200))
    suffixes = [list(range(5, 5 + n)) for n in ARMS]
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    return model, prefix, suffixes, params


def host_time_per_step(model, prefix, suffixes, steps: int) -> tuple[float, float]:
    """Best seconds of one decode step: the engine's, and HF's on an expanded DynamicCache."""
    engine = Engine(model)
    refs = engine.submit_fork(
        ForkRequest(prefix, suffixes, SamplingParams(max_new_tokens=steps + 1, ignore_eos=True))
    )
    while not engine.peek(refs[0]):  # the prefix's and the suffixes' steps
        engine.step()
    times = []
    while engine.busy:
        t0 = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - t0)
    return min(times), _hf_step_seconds(model, prefix, suffixes, steps)


def _hf_step_seconds(model, prefix, suffixes, steps: int) -> float:
    best = float("inf")
    with torch.inference_mode():
        step, state = hf_expanded_decode(model, prefix, suffixes)
        for _ in range(steps):
            t0 = time.perf_counter()
            state = step(*state)
            best = min(best, time.perf_counter() - t0)
    return best


def p1_profile(rows: int = 12) -> list[tuple[str, float, int]]:
    """(op, self CPU ms, calls) of one P1 decode step, most expensive first, and the step's total."""
    from nudgeability.models.loader import load_model

    lm = load_model("smollm2")
    w = splice_workload(lm.tokenizer, 1024, rows)
    engine = Engine(lm.model, lm.tokenizer)
    refs = engine.submit_fork(
        ForkRequest(w.prefix, w.suffixes, SamplingParams(max_new_tokens=16, ignore_eos=True))
    )
    while len(engine.peek(refs[0])) < 10:
        engine.step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        engine.step()
    found = [prof]
    while engine.busy:
        engine.step()
    totals = collections.defaultdict(lambda: [0.0, 0])
    for event in found[0].key_averages():
        if event.key.startswith("aten::"):
            totals[event.key][0] += event.self_cpu_time_total / 1000
            totals[event.key][1] += event.count
    return sorted(((k, v[0], v[1]) for k, v in totals.items()), key=lambda r: -r[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20, help="decode steps timed on the tiny model")
    ap.add_argument("--no-p1", action="store_true", help="skip the SmolLM2 profile")
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    counts = {}
    for layers in (2, 4):
        model, prefix, suffixes, params = tiny_case(layers)
        counts[layers] = (
            engine_step_ops(Engine(model), prefix, suffixes, params),
            hf_step_ops(model, prefix, suffixes),
        )
    (e2, h2), (e4, h4) = counts[2], counts[4]
    lines = [
        f"Tiny Llama (hidden 64), {len(ARMS)} arms on a 197-token prefix, step 3; top-level aten "
        "ops (views = view/transpose/slice/... that launch no kernel; a reshape that copies counts "
        f"as work). {torch.get_num_threads()} thread(s).",
        "",
        "| | engine total | engine work | HF total | HF work |",
        "|---|---|---|---|---|",
        f"| 2 layers | {e2.total} | {e2.work} | {h2.total} | {h2.work} |",
        f"| 4 layers | {e4.total} | {e4.work} | {h4.total} | {h4.work} |",
        f"| per layer | {(e4.total - e2.total) / 2:.0f} | {(e4.work - e2.work) / 2:.0f} | "
        f"{(h4.total - h2.total) / 2:.0f} | {(h4.work - h2.work) / 2:.0f} |",
        "",
        "Per layer the cascade adds to HF's work: a second attention call, the gather of each "
        "row's keys and values from its blocks, the copy that folds the arms into query rows, the "
        "merge (difference of log-sum-exps, their padding onto whole vector lanes, sigmoid, lerp) "
        "and the padding of the output to the step's pad rows. Host "
        f"reads (`.item()`/`bool()`) per engine step: {e2.host_reads}; the step's one read is the "
        "tokens' `.tolist()` (tests/engine/test_decode_step_lean.py).",
    ]
    model, prefix, suffixes, _ = tiny_case(2)
    ours, theirs = host_time_per_step(model, prefix, suffixes, args.steps)
    lines += [
        "",
        f"Host time per step, tiny 2-layer model, best of {args.steps}: engine "
        f"{ours * 1000:.2f} ms, HF {theirs * 1000:.2f} ms (engine / HF = {ours / theirs:.2f}).",
    ]
    if not args.no_p1:
        rows = p1_profile()
        total = sum(r[1] for r in rows)
        lines += [
            "",
            f"Profile of one P1 decode step (SmolLM2 fp32, 12 arms, prefix 1,024, step 10): "
            f"{total:.1f} ms of aten self time.",
            "",
            "| op | self ms | share | calls |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| `{name}` | {ms:.2f} | {100 * ms / total:.0f}% | {calls} |"
            for name, ms, calls in rows[:12]
        ]
    body = "\n".join(lines)
    publish(
        "Decode step: operations and profile (benchmarks/decode_step.py)",
        body,
        write=not args.no_write,
    )


if __name__ == "__main__":
    main()
