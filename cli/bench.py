"""`nudge bench`: throughput of splice arms on your model and hardware (costs/sweep.py).

nudge bench                                         # SmolLM2, arms 1,4,16,64 x prefix 512,2048,8192
nudge bench --model DIR --device cuda --dtype bfloat16 --baseline
nudge bench --arms 12 --prefix 1024 --new 48 --threads 1
"""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_ARMS = (1, 4, 16, 64)
DEFAULT_PREFIXES = (512, 2048, 8192)


def register(subparsers) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="throughput benchmarking of splice arms on your model and hardware",
        description="Fork N arms from one long prefix and decode them, for each (arms, prefix) "
        "point: arms/s, prefill and decode tokens/s, peak memory against its floor (weights + "
        "one prefix KV + the arms' suffix KV), on CUDA the decode step against the memory-"
        "bandwidth floor, and with --baseline the speed-up over HF generate() run per arm. "
        "Writes a JSON file and a plot.",
    )
    bench.add_argument("--model", default="smollm2", help="as for `nudge run` (default: smollm2)")
    bench.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if available)")
    bench.add_argument("--dtype", help="float32, bfloat16 or float16 (default: bf16 on CUDA)")
    bench.add_argument(
        "--arms", default=",".join(map(str, DEFAULT_ARMS)), help="arm counts, comma-separated"
    )
    bench.add_argument(
        "--prefix",
        default=",".join(map(str, DEFAULT_PREFIXES)),
        help="prefix lengths in tokens, comma-separated",
    )
    bench.add_argument("--new", type=int, default=48, help="new tokens per arm (default: 48)")
    bench.add_argument(
        "--baseline", action="store_true", help="also time HF generate() per arm (slow)"
    )
    bench.add_argument(
        "--bandwidth-gbs",
        type=float,
        help="memory bandwidth for the CUDA decode floor (default: known for H200/H100/A100)",
    )
    bench.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads (default: torch's choice); see README 'Sharding' on sharing a box",
    )
    bench.add_argument(
        "--out", default="bench.json", help="JSON output; the plot goes beside it (.png)"
    )
    bench.add_argument("--quiet", action="store_true", help="no progress bar")
    bench.set_defaults(func=_run)


def _counts(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected positive integers, comma-separated") from None
    if not values or min(values) < 1:
        raise ValueError(f"{flag} {text!r}: expected positive integers, comma-separated")
    return values


def _run(args: argparse.Namespace) -> int:
    arms = _counts(args.arms, "--arms")
    prefixes = _counts(args.prefix, "--prefix")
    if args.new < 1:
        raise ValueError(f"--new {args.new}: must be >= 1")
    from nudgeability.costs.sweep import BenchOptions, run_bench

    options = BenchOptions(
        model=args.model,
        device=args.device,
        dtype=args.dtype,
        arms=arms,
        prefixes=prefixes,
        new=args.new,
        baseline=args.baseline,
        bandwidth_gbs=args.bandwidth_gbs,
        threads=args.threads,
        out=Path(args.out),
        progress=not args.quiet,
    )
    # results on stdout as they are measured, the bar on stderr
    result = run_bench(options, on_point=lambda point: print(_line(point), flush=True))
    print(f"nudge bench: {len(result.points)} points in {result.out} and {result.plot}")
    return 0


def _line(p) -> str:
    text = (
        f"arms {p.arms:>3} prefix {p.prefix:>5}: {p.arms_per_s:8.2f} arms/s, prefill "
        f"{p.prefill_tok_s:8.0f} tok/s, decode {p.decode_tok_s:8.0f} tok/s, peak "
        f"{p.peak_bytes / 2**20:.0f} MiB (floor {p.floor_bytes / 2**20:.0f} MiB)"
    )
    if p.bandwidth_floor_step_ms is not None:
        text += (
            f", step {p.decode_step_ms:.2f} ms (bandwidth floor {p.bandwidth_floor_step_ms:.3f})"
        )
    if p.baseline_ratio is not None:
        text += f", {p.baseline_ratio:.2f}x HF generate ({p.baseline_same_tokens}/{p.arms} same)"
    return text
