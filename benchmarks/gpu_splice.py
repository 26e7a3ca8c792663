"""P1 on a GPU: Engine.fork in bf16 and with FP8 block weights, tokens/s against the bandwidth floor.

    python benchmarks/gpu_splice.py [--arms 12] [--prefix 1024] [--new 48] [--bandwidth-gbs 4800]

Needs CUDA (CI has none; run it where a GPU is available). SmolLM2-135M-Instruct is loaded in bf16,
and also written as an FP8 fine-grained block checkpoint with nudgeability's own writer (block
128x128, partial blocks on its 576-wide layers) and loaded back through the quantised loader.
For each, it runs the P1 workload and reports prefill and decode tokens/s beside the floor that
memory bandwidth sets on a decode step: every step must read the weights once, the prefix KV once
and each arm's suffix KV (`--bandwidth-gbs`, default 4,800 GB/s, the H200's HBM3e).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch
from _results import write_section
from workload import splice_workload

from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.loader import load_model
from nudgeability.models.quant import load_quantized, write_fp8


def weight_bytes(model) -> int:
    seen = {}
    for t in list(model.parameters()) + list(model.buffers()):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def measure(model, tok, w, new, bandwidth):
    engine = Engine(model, tok)
    engine.fork(w.prefix[:64], w.suffixes[:2], SamplingParams(max_new_tokens=4))  # warm-up
    torch.cuda.synchronize()
    engine.stats = type(engine.stats)()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    arms = engine.fork(w.prefix, w.suffixes, SamplingParams(max_new_tokens=new, ignore_eos=True))
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    st = engine.stats
    cfg = model.config
    kv_per_token = (
        2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 2
    )  # K+V, bf16
    n, s_max = len(w.suffixes), max(len(s) for s in w.suffixes)
    suffix_read = n * (s_max + new / 2) * kv_per_token  # mean suffix length read per step
    step_bytes = weight_bytes(model) + len(w.prefix) * kv_per_token + suffix_read
    floor_step = step_bytes / (bandwidth * 1e9)
    steps = new - 1
    return {
        "wall": wall,
        "prefill_tok_s": (len(w.prefix) + sum(map(len, w.suffixes))) / st.prefill_seconds,
        "decode_tok_s": st.decode_tokens / st.decode_seconds,
        "floor_tok_s": n / floor_step,
        "step_ms": 1000 * st.decode_seconds / steps,
        "floor_step_ms": 1000 * floor_step,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
        "tokens": [a.token_ids for a in arms],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", type=int, default=12)
    ap.add_argument("--prefix", type=int, default=1024)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--bandwidth-gbs", type=float, default=4800.0)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_splice.py needs a CUDA device; none is visible here")
    bf16 = load_model("smollm2", device="cuda", dtype=torch.bfloat16)
    w = splice_workload(bf16.tokenizer, args.prefix, args.arms)
    results = {"bf16": measure(bf16.model, bf16.tokenizer, w, args.new, args.bandwidth_gbs)}
    with tempfile.TemporaryDirectory() as tmp:
        cpu_model = load_model("smollm2", dtype=torch.bfloat16).model
        write_fp8(cpu_model, tmp, block_size=(128, 128), tokenizer=bf16.tokenizer)
        del cpu_model
        fp8 = load_quantized(tmp, device="cuda", dtype=torch.bfloat16)
        results["fp8"] = measure(fp8, bf16.tokenizer, w, args.new, args.bandwidth_gbs)
    agree = sum(a == b for a, b in zip(results["bf16"]["tokens"], results["fp8"]["tokens"]))
    lines = [
        "| weights | wall s | prefill tok/s | decode tok/s | decode step ms | floor step ms | floor tok/s | decode / floor | peak GiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['wall']:.2f} | {r['prefill_tok_s']:.0f} | {r['decode_tok_s']:.0f} | {r['step_ms']:.2f} | "
            f"{r['floor_step_ms']:.3f} | {r['floor_tok_s']:.0f} | {r['decode_tok_s'] / r['floor_tok_s']:.2f} | {r['peak_gib']:.2f} |"
        )
    body = "\n".join(
        [
            f"{torch.cuda.get_device_name()}, torch {torch.__version__}. SmolLM2-135M-Instruct, {args.arms} arms, prefix "
            f"{args.prefix}, {args.new} new tokens (greedy, EOS ignored). Floor: weights + prefix KV + suffix KV read once per "
            f"decode step at {args.bandwidth_gbs:.0f} GB/s.",
            "",
            *lines,
            "",
            f"- Greedy tokens, bf16 vs FP8 weights: {agree}/{args.arms} arms identical (reported, not asserted).",
        ]
    )
    print(body)
    if not args.no_write:
        write_section("GPU splice, bf16 and FP8 (benchmarks/gpu_splice.py)", body)


if __name__ == "__main__":
    main()
