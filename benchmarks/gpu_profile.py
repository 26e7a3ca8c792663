"""Where the engine's CUDA prefill and eager decode step spend their time (`torch.profiler`), for
reading beside the GPU check's timings (benchmarks/gpu_check.py).

    python benchmarks/gpu_profile.py            # on a GPU, from a bare checkout (about a minute)
    python benchmarks/gpu_profile.py --dry-run  # the same on CPU with a tiny model

On the random-init Qwen3-8B shape of the GPU check (benchkit/gpu/engine.py): one prompt's engine
prefill timed three times (the first pays for per-shape plans), HF's forward of it twice, a
`torch.profiler` table of a warm prefill (by device time, then host time), then a 12-row eager
decode step on a 1,024-token prefix: its median over 5 steps and its profile; last, SDPA's
backends timed on the engine's 64-query masked GQA block (on a GPU only). Everything goes to
stdout and, where `$OUT` names a folder (a device machine), to `$OUT/profile.txt`. Writes no
RESULTS.md section: its figures are read, then quoted where they explain a finding.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check import bootstrap  # noqa: E402 (the package mapped before its import)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="on CPU with a tiny model")
    args = parser.parse_args(argv)
    bootstrap()
    import torch
    from benchkit.gpu import engine as gpu_engine
    from benchkit.gpu.engine_inputs import greedy_params, random_ids, sync
    from torch.profiler import ProfilerActivity, profile

    from nudgeability.engine import Engine, ForkRequest

    out = Path(os.environ["OUT"], "profile.txt").open("w") if os.environ.get("OUT") else None

    def say(text: str) -> None:
        print(text, flush=True)
        if out is not None:
            out.write(text + "\n")
            out.flush()

    if args.dry_run:
        model, length, prefix = gpu_engine._dry_model(), 96, 40
        activities, order = [ProfilerActivity.CPU], "cpu_time_total"
    else:
        model = gpu_engine.build_model(gpu_engine.QWEN3_8B, torch.device("cuda"))
        length, prefix = 4096, 1024
        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        order = "cuda_time_total"
    device, vocab = model.device, model.config.vocab_size

    def timed(call) -> float:
        sync(device)
        t0 = time.perf_counter()
        call()
        sync(device)
        return time.perf_counter() - t0

    def table(prof, key: str, rows: int) -> str:
        return prof.key_averages().table(sort_by=key, row_limit=rows, max_name_column_width=70)

    ids = random_ids(length, 77, vocab)
    engine = Engine(model, max_batch_tokens=20_000, block_size=64)  # as on the H200 run
    for i in range(3):
        s = timed(lambda: engine.generate([ids], greedy_params(1)))
        say(f"engine prefill of {length} tokens, call {i}: {s:.3f} s")
    x = torch.tensor([ids], device=device)
    with torch.inference_mode():
        for i in range(2):
            s = timed(lambda: model(input_ids=x, logits_to_keep=1))
            say(f"HF forward of {length} tokens, call {i}: {s:.3f} s")
    with profile(activities=activities) as prof:
        timed(lambda: engine.generate([ids], greedy_params(1)))
    say(table(prof, order, 25))
    say(table(prof, "cpu_time_total", 25))

    suffixes = [random_ids(8, 100 + a, vocab) for a in range(12)]
    refs = engine.submit_fork(
        ForkRequest(random_ids(prefix, 5, vocab), suffixes, greedy_params(40))
    )
    while any(len(engine.peek(r)) < 4 for r in refs):
        engine.step()
    steps = [timed(engine.step) for _ in range(5)]
    say(f"eager decode step, 12 rows: median {1000 * statistics.median(steps):.2f} ms")
    with profile(activities=activities) as prof:
        timed(engine.step)
    say(table(prof, "cpu_time_total", 30))
    say(table(prof, order, 15))
    while engine.busy:
        engine.step()

    if not args.dry_run:  # the prefill block as the engine made it before 8eb390a
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q = torch.randn(1, 32, 64, 128, device=device, dtype=torch.bfloat16)
        k, v = (torch.randn(1, 8, 4096, 128, device=device, dtype=torch.bfloat16) for _ in "kv")
        mask = torch.ones(64, 4096, dtype=torch.bool, device=device)
        backends = {"default": None, "math": SDPBackend.MATH, "cudnn": SDPBackend.CUDNN_ATTENTION}
        backends |= {"efficient": SDPBackend.EFFICIENT_ATTENTION}
        backends |= {"flash": SDPBackend.FLASH_ATTENTION}
        for name, backend in backends.items():
            ctx = sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext()

            def block():
                F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

            try:
                with ctx:
                    block()
                    s = timed(lambda: [block() for _ in range(20)]) / 20
                say(f"SDPA, 64 queries x 4096 keys, GQA, boolean mask, {name}: {1e3 * s:.3f} ms")
            except RuntimeError as exc:
                say(f"SDPA, {name}: failed: {str(exc).splitlines()[0][:200]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
