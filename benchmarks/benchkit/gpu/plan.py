"""The GPU check's `plan` section: the default CUDA path's decode step against the floor in each
weight format, a profile of one graphed step by kernel class, and `nudge plan` on the device.

- **default path**: `nudge run --device cuda`'s engine (splice/run/engine_build.py `run_engine`,
  as engine_inputs.py `make_engine` builds every engine of the check: block 16, the pool from free
  memory, static decode with its buckets captured at start, graphs, fused layers) with one
  derived option, a row cap of the rows timed, on the random-init Qwen3-8B shape in bf16, and
  with its linears in FP8 and W4A16 (quant.py `swap`), decode steps at 1 / 12 / 64 / 256 / 512
  rows against the bandwidth floor (engine_speed.py `_floor_cell`, costs/floor.py);
- **profile**: one graphed 12-row step under `torch.profiler`, its device time by kernel class
  (GEMM, attention, norms, rotary, elementwise, copies, sampling, other): what is not weight or
  KV reads;
- **plan**: `nudge plan`'s measurement and estimate (nudgeability.costs.estimate) of a demo-sized run
  of this model and of the paper's whole campaign on this device; the model is the random-init
  shape with the tiny Qwen3 tokenizer (models/testing), whose byte-level prompts are longer than
  a real tokenizer's: the campaign's prompt tokens are too (say so beside the figure).
"""

from __future__ import annotations

import collections
import copy
import tempfile
import time
from pathlib import Path

import torch

from .engine import DRY_SIZES, GPU_SIZES, _disengage, _dry_model, build_model, run_parts
from .engine_inputs import Row, make_engine
from .engine_speed import _floor_cell
from .quant import missing_library, restore, swap

KERNEL_CLASSES = (  # (class, name fragments), first match wins; names lower-cased
    ("gemm", ("gemm", "gemv", "matmul", "_mm", "cutlass", "sm90", "ampere", "tinygemm", "scaled")),
    ("attention", ("flex", "attention", "attn", "sdpa", "flash")),
    ("norm", ("norm", "rsqrt")),
    ("rotary", ("rotary", "rope", "cos", "sin")),
    ("sampling", ("argmax", "max", "sort", "topk", "softmax")),
    ("copy", ("copy", "memcpy", "memset", "cat", "index", "gather", "scatter", "fill")),
    ("elementwise", ("elementwise", "vectorized", "mul", "add", "silu", "sigmoid", "triton")),
)
ROWS = (1, 12, 64, 256, 512)
DRY_ROWS = (1, 12)


def kernel_class(name: str) -> str:
    low = name.lower()
    for cls, parts in KERNEL_CLASSES:
        if any(p in low for p in parts):
            return cls
    return "other"


def default_path(model, sizes, rows=ROWS) -> list[Row]:
    from nudgeability.costs.floor import copy_bandwidth

    bandwidth = copy_bandwidth(model.device, sizes["copy_gib"])
    out = []
    for fmt in ("bf16", "fp8", "w4a16"):
        missing = None if fmt == "bf16" else missing_library(fmt)
        if missing:
            out.append((f"default path, {fmt}", f"skipped: {missing}"))
            continue
        originals = {} if fmt == "bf16" else swap(model, fmt)
        try:
            for n in rows:
                name = f"default path decode step, {fmt}, {n} rows"
                try:
                    out.append((name, _floor_cell(model, sizes, n, True, bandwidth)))
                except Exception as exc:
                    out.append((name, f"failed: {type(exc).__name__}: {exc}"))
                    _disengage(model)
        finally:
            restore(model, originals)
    return out


def profile(model, sizes) -> list[Row]:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    cuda = model.device.type == "cuda"
    rows = 12
    # profiled at a step after the prefill and the captures (graphs are captured at start)
    engine = make_engine(model, "profile: the 12 rows profiled decode together", max_rows=rows)
    try:
        from nudgeability.engine import ForkRequest

        from .engine_inputs import greedy_params, random_ids

        vocab = model.config.vocab_size
        suffixes = [random_ids(8, 500 + a, vocab) for a in range(rows)]
        refs = engine.submit_fork(
            ForkRequest(random_ids(sizes["prefix"], 7, vocab), suffixes, greedy_params(64))
        )
        while any(len(engine.peek(r)) < 4 for r in refs):
            engine.step()
        activity = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
        with torch_profile(activities=activity) as prof:
            engine.step()
            if cuda:
                torch.cuda.synchronize()
        while engine.busy:
            engine.step()
    finally:
        engine.runner.disengage()
    seconds: dict[str, float] = collections.defaultdict(float)
    counts: collections.Counter = collections.Counter()
    for event in prof.key_averages():
        if cuda:
            time_us = getattr(event, "device_time_total", 0.0) or getattr(
                event, "cuda_time_total", 0.0
            )
            if not time_us or event.key.startswith(("cudaGraph", "cuda", "Memcpy")):
                continue
        else:
            if not event.key.startswith("aten::") or event.cpu_parent is not None:
                continue
            time_us = event.self_cpu_time_total
        seconds[kernel_class(event.key)] += time_us / 1e6
        counts[kernel_class(event.key)] += event.count
    total = sum(seconds.values()) or 1e-12
    unit = "kernels" if cuda else "aten ops"
    out = [(f"profile of one graphed step, {rows} rows", f"{1e3 * total:.2f} ms of device time")]
    for cls, s in sorted(seconds.items(), key=lambda kv: -kv[1]):
        out.append((f"profile: {cls}", f"{1e3 * s:.3f} ms ({s / total:.0%}), {counts[cls]} {unit}"))
    return out


def plan(model, sizes, dry_run: bool) -> list[Row]:
    from nudgeability.costs.estimate import Lengths
    from nudgeability.costs.estimate.campaign import load_campaign
    from nudgeability.costs.estimate.run_estimate import estimate_paper, estimate_run, measure_run
    from nudgeability.models.loader import LoadedModel, ModelSource
    from nudgeability.models.testing.tiny_tokenizers import tiny_tokenizer
    from nudgeability.splice.run.config import RunConfig

    budgets = (8, 4) if dry_run else (4096, 2048)
    config = RunConfig(
        model="random-init-qwen3",
        family="qwen3",
        task="strategyqa",
        n=2 if dry_run else 8,
        max_new_tokens=budgets[0],
        max_new_tokens_arm=budgets[1],
        device=str(model.device),
        dtype="bfloat16",
    )
    if dry_run:  # the stand-in's short context would refuse MuSiQue's byte-level prompts
        model.config.max_position_embeddings = 1 << 16
    with tempfile.TemporaryDirectory() as directory:
        tokenizer = tiny_tokenizer("qwen3")
        config_file = copy.deepcopy(model.config)  # what the family's detection reads
        types = getattr(config_file, "layer_types", None)
        if types:  # a stand-in's shape may keep its template's longer list
            config_file.layer_types = types[: config_file.num_hidden_layers]
        config_file.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        source = ModelSource("random-init-qwen3", Path(directory))
        loaded = LoadedModel(model, tokenizer, source)
        t0 = time.monotonic()
        lengths = Lengths()
        measured = measure_run(config, lengths=lengths, workers=1, loaded=loaded, since=t0)
        run = estimate_run(config, lengths=lengths, measured=measured)
        paper = estimate_paper(measured, load_campaign())
    rates = measured.rates
    steps = ", ".join(f"{1e3 * t:.2f} ms at {r}" for r, t in rates.decode)
    hours = {}
    for r in paper.runs:
        hours[r.model] = hours.get(r.model, 0.0) + r.wall_seconds / 3600
    return [
        (
            "plan: measured",
            f"prefill {rates.prefill_tokens_per_s:,.0f} tok/s; decode {steps} rows; "
            f"rows cap {measured.max_rows}; in {time.monotonic() - t0:.0f} s",
        ),
        (
            f"plan: strategyqa n={config.n}, budgets {budgets[0]},{budgets[1]}",
            f"{run.wall_seconds:.0f} s wall (the model already loaded), "
            f"{run.generated_tokens:,.0f} new tokens expected",
        ),
        (
            "plan: the paper's campaign (9 models x 2 tasks, costs/estimate/paper_campaign.toml)",
            f"{paper.gpu_hours:.1f} hours of this device; per model: "
            + ", ".join(f"{m} {h:.1f}" for m, h in hours.items())
            + " (prompts as the tiny byte-level tokenizer counts them: longer than real)",
        ),
    ]


def section(deadline: float, *, dry_run: bool = False, progress=None) -> list[Row]:
    if not dry_run and not torch.cuda.is_available():
        return [("plan on CUDA", "skipped: no CUDA device (use --dry-run on CPU)")]
    sizes = DRY_SIZES if dry_run else GPU_SIZES
    t0 = time.monotonic()
    try:
        model = _dry_model() if dry_run else build_model_cuda()
    except Exception as exc:
        return [("model", f"failed: {type(exc).__name__}: {exc}")]
    rows = [
        (
            "model",
            f"{model.config.num_hidden_layers} layers, built in {time.monotonic() - t0:.0f} s",
        )
    ]
    parts = (
        ("profile", lambda: profile(model, sizes)),
        ("plan", lambda: plan(model, sizes, dry_run)),
        ("default path", lambda: default_path(model, sizes, DRY_ROWS if dry_run else ROWS)),
    )
    return run_parts(rows, parts, deadline, progress, model)


def build_model_cuda():
    from .engine import QWEN3_8B

    return build_model(QWEN3_8B, torch.device("cuda"))
