"""Where the cost of batch invariance goes: one SmolLM2 fork (480-token prefix, 32 arms x 32
tokens) under each part of the construction switched on alone. Run alone (timed figures):

    python benchmarks/invariance_cost.py
"""

import random
import time

import torch

torch.set_num_threads(2)
import nudgeability.models.invariant as inv
from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.loader import load_model

lm = load_model("smollm2")
model = lm.model
rng = random.Random(0)
prefix = [rng.randrange(1000, 40000) for _ in range(480)]
suffixes = [[rng.randrange(1000, 40000) for _ in range(20)] for _ in range(32)]
params = SamplingParams(max_new_tokens=32, ignore_eos=True)


def timed(**kw):
    e = Engine(model, **kw)
    e.fork(prefix, suffixes[:2], SamplingParams(max_new_tokens=2, ignore_eos=True))
    t = time.perf_counter()
    e.fork(prefix, suffixes, params)
    return time.perf_counter() - t


a = timed()
b = timed(batch_invariant=False)
orig = inv.invariant_products
from contextlib import nullcontext

import nudgeability.engine.model_runner as mr

mr.invariant_products = lambda: (
    nullcontext()
)  # products at 2 threads, plain F.linear; attention still fixed-shape
c = timed()
print(
    f"fork 480-token prefix into 32 arms x 32 tokens, 2 threads set: invariant (1-thread forward, tiles) {a:.1f} s; "
    f"batch_invariant=False {b:.1f} s; invariant rows but library F.linear at 2 threads {c:.1f} s"
)
from contextlib import contextmanager


@contextmanager
def tiles_only():
    torch.nn.functional.linear = inv.linear
    try:
        yield
    finally:
        torch.nn.functional.linear = inv._torch_linear


mr.invariant_products = tiles_only
d = timed()
torch.set_num_threads(1)
mr.invariant_products = lambda: nullcontext()
e1 = timed()
print(f"16-row tiles at 2 threads {d:.1f} s; library F.linear at 1 thread {e1:.1f} s")
