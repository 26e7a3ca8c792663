"""Where the cost of batch invariance goes: one SmolLM2 fork (480-token prefix, 32 arms x 32
tokens) with each part of the construction on alone, after a warm-up fork. Run it alone on the
machine (timed figures); it prints one line per variant.

    python benchmarks/invariance_cost.py
"""

from __future__ import annotations

import random
import time
from contextlib import contextmanager, nullcontext

import torch

import nudgeability.engine.model_runner as model_runner
import nudgeability.models.invariant as invariant
from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.loader import load_model


@contextmanager
def tiles_only():
    """The 16-row tiles without the single thread (not invariant under every MKL branch)."""
    torch.nn.functional.linear = invariant.linear
    try:
        yield
    finally:
        torch.nn.functional.linear = invariant._torch_linear


def main() -> None:
    model = load_model("smollm2").model
    rng = random.Random(0)
    prefix = [rng.randrange(1000, 40000) for _ in range(480)]
    suffixes = [[rng.randrange(1000, 40000) for _ in range(20)] for _ in range(32)]
    params = SamplingParams(max_new_tokens=32, ignore_eos=True)

    def timed(threads: int, products, **engine_options) -> float:
        torch.set_num_threads(threads)
        model_runner.invariant_products = products
        engine = Engine(model, **engine_options)
        engine.fork(prefix, suffixes[:2], SamplingParams(max_new_tokens=2, ignore_eos=True))
        start = time.perf_counter()
        engine.fork(prefix, suffixes, params)
        return time.perf_counter() - start

    variants = {
        "the invariant engine, 2 cores (its tiles and attention items shared)": (
            2,
            invariant.invariant_products,
            {},
        ),
        "the invariant engine, 1 core": (1, invariant.invariant_products, {}),
        "batch_invariant=False, 2 threads": (
            2,
            invariant.invariant_products,
            {"batch_invariant": False},
        ),
        "library F.linear, 2 threads": (2, nullcontext, {}),
        "16-row tiles, 2 threads": (2, tiles_only, {}),
        "library F.linear, 1 thread": (1, nullcontext, {}),
    }
    for name, (threads, products, options) in variants.items():
        print(f"{name}: {timed(threads, products, **options):.1f} s")
    model_runner.invariant_products = invariant.invariant_products


if __name__ == "__main__":
    main()
