"""`nudge bench`: throughput of splice arms on your model and hardware (see `splice/bench.py`).

nudge bench                                         # SmolLM2, arms 1,4,16,64 x prefix 512,2048,8192
nudge bench --model DIR --device cuda --dtype bfloat16 --baseline
nudge bench --arms 12 --prefix 1024 --new 48 --threads 1
"""

from __future__ import annotations

import argparse
import itertools
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
    from nudgeability.engine.threads import set_threads

    threads = set_threads(args.threads)

    import torch

    from nudgeability.models.loader import load_model
    from nudgeability.models.progress import progress_bar
    from nudgeability.splice import bench
    from nudgeability.splice.prepare import _device as resolve_device
    from nudgeability.splice.run_config import DTYPES

    device = resolve_device(args.device)
    dtype = args.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise ValueError(f"--out {out}: the directory {out.parent} does not exist")
    loaded = load_model(args.model, device=device, dtype=getattr(torch, dtype))
    model, tokenizer = loaded.model, loaded.tokenizer
    limit = getattr(
        getattr(model.config, "text_config", None) or model.config, "max_position_embeddings", None
    )
    if limit is not None and max(prefixes) + 30 + args.new > limit:
        raise ValueError(
            f"--prefix {max(prefixes)}: prefix + suffix (up to 30) + --new {args.new} exceeds the "
            f"model's context of {limit}"
        )
    bandwidth = bench.bandwidth_gbs(torch.device(device), args.bandwidth_gbs)
    points = []
    grid = list(itertools.product(prefixes, arms))
    bar = progress_bar(len(grid), "bench", "point", enabled=not args.quiet)
    for prefix, n in grid:
        bar.set_postfix(prefix=prefix, arms=n)
        point = bench.measure_point(
            model, tokenizer, n, prefix, args.new, baseline=args.baseline, bandwidth=bandwidth
        )
        points.append(point)
        bar.update(1)
        print(_line(point), flush=True)  # results on stdout, the bar on stderr
    bar.close()
    meta = {
        "model": args.model,
        "device": device,
        "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
        "dtype": dtype,
        "threads": threads,
        "new": args.new,
        "bandwidth_gbs": bandwidth,
        "torch": torch.__version__,
    }
    bench.write_json(out, meta, points)
    plot = out.with_suffix(".png")
    bench.plot(plot, points, f"{args.model}, {meta['device_name']}, {dtype}, {threads} threads")
    print(f"nudge bench: {len(points)} points in {out} and {plot}")
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
