"""The child process of former.run_former: it runs under the former checkout's `nudgeability`
(on PYTHONPATH), so it imports nothing of today's package. It reads one request (JSON on stdin:
the checkpoint, the work, the KV budget, the threads), runs the former engine's static batches,
and prints the `Run` fields as one JSON line."""

from __future__ import annotations

import json
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from nudgeability.engine import Engine, ForkRequest, SamplingParams


def _params(budgets, stop_ids, ignore_eos):
    return [
        SamplingParams(max_new_tokens=b, stop_token_ids=tuple(stop_ids), ignore_eos=ignore_eos)
        for b in budgets
    ]


def main() -> None:
    request = json.loads(sys.stdin.read())
    if request["threads"]:
        torch.set_num_threads(request["threads"])
    model = AutoModelForCausalLM.from_pretrained(request["model"], dtype=torch.float32).eval()
    try:
        tok = AutoTokenizer.from_pretrained(request["model"])
    except (OSError, ValueError):  # a bare checkpoint (the tests' tiny models) has none
        tok = None
    kind, items, budgets, stop_ids, ignore_eos = request["work"]
    engine = Engine(model, tok, max_batch_tokens=request["kv"])
    rows = []
    original = type(engine).step

    def step(batch, cache):
        rows.append(len(batch.active))
        original(engine, batch, cache)

    engine.step = step
    t0 = time.perf_counter()
    if kind == "generate":
        tokens = [
            o.token_ids for o in engine.generate(items, _params(budgets, stop_ids, ignore_eos))
        ]
    else:
        requests = [
            ForkRequest(p, s, _params(b, stop_ids, ignore_eos)) for (p, s), b in zip(items, budgets)
        ]
        tokens = [o.token_ids for arms in engine.fork_many(requests) for o in arms]
    wall = time.perf_counter() - t0
    run = {
        "wall": wall,
        "tokens": tokens,
        "rows_per_step": rows,
        "peak_kv_bytes": engine.stats.peak_cache_bytes,
        "note": "decode steps only; KV allocated per batch for whole budgets",
    }
    print(json.dumps(run))


if __name__ == "__main__":
    main()
