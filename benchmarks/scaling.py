"""Scaling: time and peak memory of Engine.fork as the arms N and the prefix P grow; memory against its floor.

    python benchmarks/scaling.py [--new 48]

Each point runs in a fresh child process (SmolLM2 fp32, CPU): N = 1, 2, 4, ..., 64 arms on a
1,024-token prefix, then P = 256 ... 4,096 with 12 arms; suffixes of 10-30 tokens, 48 new tokens
each (EOS ignored). Peak memory is the child's peak RSS during the fork minus its runtime baseline
(Python + torch before the model), against the floor: weights + one prefix KV + N suffix KVs.
Writes benchmarks/scaling.png and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchkit.child_memory import run_child
from benchkit.results import write_section

from nudgeability.costs.memory import reset_peak, rss_kib

HERE = Path(__file__).resolve().parent
ARMS = (1, 2, 4, 8, 12, 16, 32, 64)
PREFIXES = (256, 512, 1024, 2048, 4096)


def child(arms: int, prefix: int, new: int) -> None:
    import torch

    from nudgeability.costs.splice_workload import splice_workload
    from nudgeability.engine import Engine, SamplingParams
    from nudgeability.models.loader import load_model

    baseline = rss_kib()  # Python + torch imported, no model
    lm = load_model("smollm2")
    model, config = lm.model, lm.model.config
    w = splice_workload(lm.tokenizer, prefix, arms)
    engine = Engine(model, lm.tokenizer)
    weights = sum(
        {
            p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()
        }.values()
    )
    loaded = rss_kib()
    # A short warm-up fork pages every weight in and initialises the kernels' first-use buffers.
    engine.fork(w.prefix[:32], w.suffixes[:2], SamplingParams(max_new_tokens=2))
    warm = rss_kib()
    reset_peak()
    t0 = time.perf_counter()
    engine.fork(w.prefix, w.suffixes, SamplingParams(max_new_tokens=new, ignore_eos=True))
    wall = time.perf_counter() - t0
    peak = rss_kib("VmHWM")
    per_token = (
        2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 4
    )  # K and V, fp32
    suffix_slots = arms * (max(len(s) for s in w.suffixes) + new - 1)
    floor = weights + per_token * (prefix + suffix_slots)
    print(
        json.dumps(
            {
                "arms": arms,
                "prefix": prefix,
                "new": new,
                "wall_s": wall,
                "baseline_mib": baseline / 1024,
                "loaded_mib": loaded / 1024,
                "peak_mib": peak / 1024,
                "used_mib": (peak - baseline) / 1024,
                "floor_mib": floor / 2**20,
                "warm_mib": warm / 1024,
                "fork_peak_mib": (peak - warm) / 1024,
                "model_mib": weights / 2**20 + (peak - warm) / 1024,
                "weights_mib": weights / 2**20,
                "kv_mib": per_token * (prefix + suffix_slots) / 2**20,
                "threads": torch.get_num_threads(),
            }
        )
    )


def plot(by_n, by_p, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    axes[0].plot([r["arms"] for r in by_n], [r["wall_s"] / r["arms"] for r in by_n], "o-")
    axes[0].set(
        xscale="log",
        xlabel="arms N (prefix 1024)",
        ylabel="seconds per arm",
        title="Per-arm cost flattens with N",
    )
    axes[1].plot([r["prefix"] for r in by_p], [r["wall_s"] for r in by_p], "o-")
    axes[1].set_xscale("log", base=2)
    axes[1].set_xticks([r["prefix"] for r in by_p], [str(r["prefix"]) for r in by_p])
    axes[1].set(xlabel="prefix P (12 arms)", ylabel="seconds", title="Fork time vs prefix length")
    for rows, _key, label in ((by_n, "arms", "vs N (P=1024)"), (by_p, "prefix", "vs P (N=12)")):
        axes[2].plot(
            [r["floor_mib"] for r in rows], [r["model_mib"] for r in rows], "o-", label=label
        )
    lo = min(r["floor_mib"] for r in by_n + by_p) * 0.97
    hi = max(r["model_mib"] for r in by_n + by_p) * 1.03
    axes[2].plot([lo, hi], [lo, hi], "k:", label="floor")
    axes[2].plot([lo, hi], [lo * 1.15, hi * 1.15], "k--", lw=0.8, label="floor + 15%")
    axes[2].set_xlim(lo, hi)
    axes[2].set_ylim(lo, hi * 1.15)
    axes[2].set(
        xlabel="floor MiB (weights + prefix KV + suffix KV)",
        ylabel="weights + fork peak MiB",
        title="Peak memory vs floor",
    )
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--arms", default=",".join(map(str, ARMS)), help="N points (must hold 12)")
    ap.add_argument("--prefixes", default=",".join(map(str, PREFIXES)), help="P points")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    arms = [int(n) for n in args.arms.split(",")]
    prefixes = [int(p) for p in args.prefixes.split(",")]
    script = str(Path(__file__).resolve())
    by_n = [run_child(script, str(n), "1024", str(args.new)) for n in arms]
    by_p = [run_child(script, "12", str(p), str(args.new)) for p in prefixes]
    for r in by_n + by_p:
        print(json.dumps(r))
    lines = [
        "| arms N | prefix P | wall s | s per arm | fork's own peak MiB | weights + fork peak MiB | floor MiB | "
        "(weights + fork peak) / floor | process peak above runtime MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in by_n + by_p:
        lines.append(
            f"| {r['arms']} | {r['prefix']} | {r['wall_s']:.2f} | {r['wall_s'] / r['arms']:.3f} | "
            f"{r['fork_peak_mib']:.0f} | {r['model_mib']:.0f} | {r['floor_mib']:.0f} | "
            f"{r['model_mib'] / r['floor_mib']:.3f} | {r['used_mib']:.0f} |"
        )
    p4 = next(r for r in by_n if r["arms"] == 12)
    ratio = p4["model_mib"] / p4["floor_mib"]
    body = "\n".join(
        [
            f"SmolLM2-135M-Instruct fp32, CPU ({by_n[0]['threads']} torch threads), suffixes 10–30 tokens, {args.new} new tokens "
            "per arm (EOS ignored). Each point is a fresh child process: load the model, run a short warm-up fork (it pages "
            "every weight in and initialises the kernels), reset the peak, run the fork. *Fork's own peak* = VmHWM during the "
            "fork minus the RSS before it; the floor = weights + one prefix KV + N suffix KV (fp32), to which *weights + fork "
            "peak* is compared. The last column is the whole process's peak above Python + torch before the model (it also "
            "holds the runtime's first-use buffers and freed heap that glibc keeps).",
            "",
            *lines,
            "",
            f"- **Memory against the floor** (12 arms, 1,024-token prefix): weights + fork peak {p4['model_mib']:.0f} MiB vs floor {p4['floor_mib']:.0f} MiB "
            f"= {ratio:.3f}× (target ≤ 1.15×: **{'met' if ratio <= 1.15 else 'NOT met'}**).",
            "- Per-arm cost from N=1 to N=64: "
            + ", ".join(f"{r['wall_s'] / r['arms']:.2f}" for r in by_n)
            + " s.",
            "",
            "![scaling](scaling.png) (raw figures: `scaling.json`)",
        ]
    )
    print(body)
    if not args.no_write:
        plot(by_n, by_p, HERE / "scaling.png")
        (HERE / "scaling.json").write_text(
            json.dumps({"by_arms": by_n, "by_prefix": by_p}, indent=1) + "\n"
        )
        write_section("Scaling and memory (benchmarks/scaling.py)", body)


if __name__ == "__main__":
    main()
