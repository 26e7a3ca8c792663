"""Benchmark: what the grounded-nudge signals cost.

1. The engine's per-token uncertainty summary: SmolLM2 (or --model) generating --prompts
   sequences of --tokens new tokens, greedy and ignoring EOS, with and without
   `SamplingParams.token_stats`, interleaved rounds, best of --repeats; plus the hidden-state
   pass (`return_hidden`, one token) over the same prompts.
2. The statistics: `ground()` on a synthetic experiment of --problems problems with five signals
   (a 64-dimensional probe) and 20,000 replicates, after a warm-up that compiles the kernels.

Writes its section of benchmarks/RESULTS.md.

    python benchmarks/bench_grounding.py [--model smollm2] [--device cpu] [--prompts 16]
        [--tokens 128] [--repeats 3] [--problems 1000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from nudgeability.bench.results import publish
from nudgeability.engine import Engine, SamplingParams  # noqa: E402
from nudgeability.models.loader import load_model  # noqa: E402
from nudgeability.stats import ExperimentTable  # noqa: E402
from nudgeability.stats.grounding.join import SignalData  # noqa: E402
from nudgeability.stats.grounding.summary import ground  # noqa: E402


def best_of(repeats: int, runs: dict) -> dict[str, float]:
    best = {name: float("inf") for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def engine_costs(args) -> str:
    loaded = load_model(args.model, device=args.device)
    engine = Engine(loaded.model, loaded.tokenizer)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(100, 5000, 200).tolist() for _ in range(args.prompts)]

    def generate(**flags):
        params = SamplingParams(max_new_tokens=args.tokens, ignore_eos=True, **flags)
        return lambda: engine.generate(prompts, params)

    generate()()  # warm-up
    best = best_of(
        args.repeats,
        {
            "plain": generate(),
            "token_stats": generate(token_stats=True),
            "hidden pass": lambda: engine.generate(
                prompts, SamplingParams(max_new_tokens=1, return_hidden=True)
            ),
        },
    )
    return (
        f"Engine ({args.model}, {args.device}): {args.prompts} prompts x {args.tokens} new tokens: "
        f"{best['plain']:.2f} s plain, {best['token_stats']:.2f} s with token_stats "
        f"(x{best['token_stats'] / best['plain']:.3f}); hidden-state pass over the same prompts "
        f"{best['hidden pass']:.2f} s."
    )


def stats_costs(args) -> str:
    rng = np.random.default_rng(1)
    n = args.problems
    s = (rng.random(n) < 0.63).astype(np.int8)
    table = ExperimentTable(
        s=s,
        base=rng.integers(0, 2, n).astype(np.int8),
        arms={
            "conf": rng.integers(0, 2, n).astype(np.int8),
            "doubt": rng.integers(0, 2, n).astype(np.int8),
        },
    )
    names = ("entropy_mean", "entropy_max", "nll_mean", "consistency")
    data = SignalData(
        raw={name: rng.normal(size=n) + s for name in names},
        hidden=(rng.normal(size=(n, 64)) + s[:, None]).astype(np.float32),
        samples=4,
    )
    ground(table, data, n_boot=100)  # warm-up: numba kernels compiled or loaded
    best = best_of(args.repeats, {"ground": lambda: ground(table, data, n_boot=20000)})
    return (
        f"Statistics: ground() on {n} problems, 5 signals (64-d probe, 5 folds), 20,000 "
        f"replicates: {best['ground']:.2f} s."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--problems", type=int, default=1000)
    args = parser.parse_args()
    body = engine_costs(args) + "\n\n" + stats_costs(args)
    publish("Grounded-nudge signals", body)


if __name__ == "__main__":
    main()
