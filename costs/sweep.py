"""Throughput of splice arms on the user's model and hardware: the measurements behind `nudge bench`.

`run_bench(BenchOptions(...))` loads the model, measures every point of the (prefix, arms) sweep,
and writes the points to a JSON file with a plot beside it; it returns a `BenchResult`.

One point forks `arms` short suffixes (10-30 tokens of real text) from one `prefix`-token prefix
and generates `new` tokens in each (greedy, EOS ignored), after a short warm-up fork. It reports
arms/s, prefill and decode tokens/s, and peak memory against its floor: the weights, one prefix's
KV and the arms' suffix KV. With a baseline, HF `generate()` runs each arm alone on the full
prompt (the same tokens), and the ratio is its wall time over the engine's. On CUDA the decode step
is also set against the memory-bandwidth floor: each step must read the weights, the prefix KV and
every arm's suffix KV once.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.loader import load_model
from nudgeability.splice.run.config import DTYPES
from nudgeability.splice.run.validation import resolve_device
from nudgeability.util.atomic import atomic_write_lines
from nudgeability.util.progress import progress_bar
from nudgeability.util.threads import set_threads

from .memory import memory_mark, memory_peak
from .splice_workload import hf_generate, splice_workload

# HBM bandwidth of common accelerators (GB/s, vendor figures) for the decode floor; others: pass it
BANDWIDTH_GBS = {"H200": 4800.0, "H100 SXM": 3350.0, "H100 PCIe": 2000.0, "A100": 2039.0}


@dataclass
class BenchPoint:
    """One measured point; seconds, tokens/s and bytes."""

    arms: int
    prefix: int
    new: int
    suffix_tokens: int
    wall_s: float
    arms_per_s: float
    prefill_tok_s: float
    decode_tok_s: float
    decode_step_ms: float
    peak_bytes: int  # weights + the fork's own peak (CUDA: allocator peak; CPU: RSS rise)
    floor_bytes: int  # weights + one prefix KV + the arms' suffix KV
    baseline_s: float | None = None  # HF generate() per arm, all arms
    baseline_ratio: float | None = None  # baseline_s / wall_s
    baseline_same_tokens: int | None = None  # arms whose tokens equal HF's (up to an EOS)
    bandwidth_floor_step_ms: float | None = None  # CUDA: bytes one step must read / bandwidth


def weight_bytes(model) -> int:
    seen = {}
    for t in list(model.parameters()) + list(model.buffers()):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def kv_bytes_per_token(model) -> int:
    """K and V bytes one token occupies over every layer that stores KV, in the model's dtype."""
    config = getattr(model.config, "text_config", None) or model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    layers = config.num_hidden_layers - (getattr(config, "num_kv_shared_layers", 0) or 0)
    size = next(model.parameters()).element_size()
    return 2 * layers * config.num_key_value_heads * head_dim * size


def bandwidth_gbs(device: torch.device, given: float | None) -> float | None:
    if given is not None or device.type != "cuda":
        return given
    name = torch.cuda.get_device_name(device)
    return next((bw for key, bw in BANDWIDTH_GBS.items() if key in name), None)


def measure_point(
    model, tokenizer, arms: int, prefix: int, new: int, *, baseline: bool, bandwidth: float | None
) -> BenchPoint:
    device = next(model.parameters()).device
    work = splice_workload(tokenizer, prefix, arms)
    params = SamplingParams(max_new_tokens=new, ignore_eos=True)
    engine = Engine(model, tokenizer)
    engine.fork(work.prefix[:32], work.suffixes[:2], SamplingParams(max_new_tokens=2))  # warm-up
    engine.stats = type(engine.stats)()
    before = memory_mark(device)
    t0 = time.perf_counter()
    outs = engine.fork(work.prefix, work.suffixes, params)
    _sync(device)
    wall = time.perf_counter() - t0
    peak = memory_peak(device, before) + (weight_bytes(model) if device.type == "cpu" else 0)
    stats, suffix_tokens = engine.stats, sum(map(len, work.suffixes))
    per_token = kv_bytes_per_token(model)
    suffix_slots = arms * (max(map(len, work.suffixes)) + new - 1)
    point = BenchPoint(
        arms=arms,
        prefix=prefix,
        new=new,
        suffix_tokens=suffix_tokens,
        wall_s=wall,
        arms_per_s=arms / wall,
        prefill_tok_s=(prefix + suffix_tokens) / max(stats.prefill_seconds, 1e-9),
        decode_tok_s=stats.decode_tokens / max(stats.decode_seconds, 1e-9),
        decode_step_ms=1000 * stats.decode_seconds / max(new - 1, 1),
        peak_bytes=peak,
        floor_bytes=weight_bytes(model) + per_token * (prefix + suffix_slots),
    )
    if bandwidth is not None:
        # mean suffix length read per step: the suffix plus half the new tokens
        suffix_read = arms * (suffix_tokens / arms + new / 2) * per_token
        step_bytes = weight_bytes(model) + prefix * per_token + suffix_read
        point.bandwidth_floor_step_ms = 1000 * step_bytes / (bandwidth * 1e9)
    if baseline:
        t0 = time.perf_counter()
        hf = [hf_generate(model, work.prefix + s, new) for s in work.suffixes]
        _sync(device)
        point.baseline_s = time.perf_counter() - t0
        point.baseline_ratio = point.baseline_s / wall
        point.baseline_same_tokens = sum(
            _same_until_eos(o.token_ids, h, engine.eos_ids) for h, o in zip(hf, outs)
        )
    return point


def _same_until_eos(ours: list[int], hf: list[int], eos_ids: set[int]) -> bool:
    """Both generate `new` tokens: the engine ignores EOS, HF suppresses it (`min_new_tokens`),
    so the two agree up to the first EOS the engine chose."""
    cut = next((i for i, t in enumerate(ours) if t in eos_ids), len(ours))
    return ours[:cut] == hf[:cut]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def write_json(path: Path, meta: dict, points: list[BenchPoint]) -> None:
    payload = {"meta": meta, "points": [asdict(p) for p in points]}
    atomic_write_lines(path, json.dumps(payload, indent=2).splitlines())


def plot(path: Path, points: list[BenchPoint], title: str) -> None:
    """arms/s and decode tokens/s against the number of arms, one line per prefix length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for prefix in sorted({p.prefix for p in points}):
        row = sorted((p for p in points if p.prefix == prefix), key=lambda p: p.arms)
        arms = [p.arms for p in row]
        axes[0].plot(arms, [p.arms_per_s for p in row], marker="o", label=f"prefix {prefix}")
        axes[1].plot(arms, [p.decode_tok_s for p in row], marker="o", label=f"prefix {prefix}")
    for ax, label in zip(axes, ("arms / s", "decode tokens / s")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("arms")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)


# ----- the sweep of `nudge bench` ------------------------------------------------------------------
@dataclass(frozen=True)
class BenchOptions:
    """What `nudge bench` measures (its flags; the default sweep is the command's)."""

    arms: Sequence[int]  # arm counts
    prefixes: Sequence[int]  # prefix lengths in tokens
    model: str = "smollm2"
    device: str | None = None  # None: cuda if available, else cpu
    dtype: str | None = None  # None: bfloat16 on CUDA, float32 on CPU
    new: int = 48  # new tokens per arm
    baseline: bool = False  # also time HF generate() per arm
    bandwidth_gbs: float | None = None  # None: known for H200/H100/A100
    threads: int | None = None  # torch's CPU threads; None: torch's choice
    out: Path = Path("bench.json")
    progress: bool = True


@dataclass(frozen=True)
class BenchResult:
    points: list[BenchPoint]
    meta: dict
    out: Path  # the JSON file
    plot: Path  # the plot beside it


def run_bench(
    options: BenchOptions, on_point: Callable[[BenchPoint], None] = lambda point: None
) -> BenchResult:
    """Measure every (prefix, arms) point of the sweep (`on_point` sees each as it is measured),
    then write the JSON file and the plot. A ValueError naming the flag for an option that
    cannot be used, before the model is loaded where it can."""
    for flag, values in (("--arms", options.arms), ("--prefix", options.prefixes)):
        if not values or min(values) < 1:
            raise ValueError(f"{flag}: expected positive integers, comma-separated")
    if options.new < 1:
        raise ValueError(f"--new {options.new}: must be >= 1")
    threads = set_threads(options.threads)
    device = resolve_device(options.device)
    dtype = options.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    out = Path(options.out)
    if not out.parent.is_dir():
        raise ValueError(f"--out {out}: the directory {out.parent} does not exist")
    loaded = load_model(options.model, device=device, dtype=getattr(torch, dtype))
    model, tokenizer = loaded.model, loaded.tokenizer
    limit = getattr(
        getattr(model.config, "text_config", None) or model.config, "max_position_embeddings", None
    )
    if limit is not None and max(options.prefixes) + 30 + options.new > limit:
        raise ValueError(
            f"--prefix {max(options.prefixes)}: prefix + suffix (up to 30) + --new {options.new} "
            f"exceeds the model's context of {limit}"
        )
    bandwidth = bandwidth_gbs(torch.device(device), options.bandwidth_gbs)
    points = []
    grid = list(itertools.product(options.prefixes, options.arms))
    bar = progress_bar(len(grid), "bench", "point", enabled=options.progress)
    for prefix, n in grid:
        bar.set_postfix(prefix=prefix, arms=n)
        point = measure_point(
            model, tokenizer, n, prefix, options.new, baseline=options.baseline, bandwidth=bandwidth
        )
        points.append(point)
        bar.update(1)
        on_point(point)
    bar.close()
    meta = {
        "model": options.model,
        "device": device,
        "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
        "dtype": dtype,
        "threads": threads,
        "new": options.new,
        "bandwidth_gbs": bandwidth,
        "torch": torch.__version__,
    }
    write_json(out, meta, points)
    plot_path = out.with_suffix(".png")
    plot(plot_path, points, f"{options.model}, {meta['device_name']}, {dtype}, {threads} threads")
    return BenchResult(points, meta, out, plot_path)
