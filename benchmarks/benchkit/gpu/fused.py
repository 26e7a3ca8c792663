"""The fused layer kernels' section of the GPU check (engine/fused/): what the CPU cannot check.

    python benchmarks/gpu_check.py --only fused [--budget 120]

1. **The kernels at Qwen3-8B's widths** (hidden 4096, intermediate 12288, 32 heads of 128), in
   bf16 and fp32, at 1, 12 and 64 rows: each wrapper of engine/fused/triton_ops.py against a
   float64 reference of its definition, as its largest error over the rounding bound that
   tests/engine/fused/test_triton_ops.py derives (bf16's unit 2^-8), so compiled Triton's own
   arithmetic (approximate rsqrt and exp, fused multiply-adds, its reduction trees) is held to
   what the interpreter was.
2. **A decode step, fused against eager, on the same model**: a random-init Qwen3 of
   Qwen3-8B's layer shape (`LAYERS` layers, bf16), adopted once (engine/fused/layers.py), so
   that HF's forward of B new tokens over a 256-token cache runs eager outside `fused_forward()`
   and fused inside it: the logits' largest difference relative to the largest logit, and the
   median step time of each (CUDA events), at B = 1, 12, 64.

`section(deadline, dry_run=False)` returns rows `(check, result)` for check.py's table; with
`dry_run` the same on CPU under `TRITON_INTERPRET=1` (fp16 for bf16, which the interpreter gets
wrong), on small shapes and a tiny Qwen3, timed by the wall clock.
"""

from __future__ import annotations

import inspect
import statistics
import time
from contextlib import nullcontext

import torch

from nudgeability.models.testing.tiny import decoder_sizes

from .check import Row, triton_refusal

ROWS = (1, 12, 64)
LAYERS = 8  # enough layers that a step's launches, not the LM head, set its time
PREFIX = 256
WIDTHS = {"hidden": 4096, "intermediate": 12288, "heads": 32, "head_dim": 128}
DRY_WIDTHS = {"hidden": 96, "intermediate": 160, "heads": 2, "head_dim": 32}
UNIT = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
U32 = UNIT[torch.float32]


def _excess(out: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor) -> float:
    """The largest |out - ref| over its bound (<= 1: within it)."""
    return ((out.double() - ref).abs() / bound).max().item()


def _normed(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x = x.double()
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def kernel_checks(device, dtype, rows: int, widths: dict) -> list[tuple[str, float]]:
    """(kernel, largest error over its bound) of each wrapper on random inputs."""
    from nudgeability.engine.fused import triton_ops as ops

    u, tiny = UNIT[dtype], 2.0**-24 if dtype == torch.float16 else 2.0**-133
    h, inter, heads, d = (widths[k] for k in ("hidden", "intermediate", "heads", "head_dim"))
    x = torch.randn(rows, h, device=device, dtype=torch.float64)
    residual = 4 * torch.randn_like(x)
    weight = 1 + 0.5 * torch.randn(h, device=device, dtype=torch.float64)
    x, residual, weight = x.to(dtype), residual.to(dtype), weight.to(dtype)
    out = []
    ref = weight.double() * _normed(x)
    norm_rel = (h / 2 + 4) * U32 + 2 * u
    bound = norm_rel * ref.abs() + tiny
    out.append(("rms_norm", _excess(ops.rms_norm(x, weight, 1e-6), ref, bound)))
    normed, summed = ops.rms_norm(x, weight, 1e-6, residual=residual)
    ref = weight.double() * _normed(summed)
    out.append(("rms_norm + residual", _excess(normed, ref, norm_rel * ref.abs() + tiny)))
    ref = _normed(x) * weight.double()
    bound = ((h / 2 + 4) * U32 + u) * ref.abs() + tiny
    out.append(
        (
            "rms_norm, Gemma 4's rule",
            _excess(ops.rms_norm(x, weight, 1e-6, ops.SCALE_THEN_CAST), ref, bound),
        )
    )
    gate = (3 * torch.randn(rows, inter, device=device, dtype=torch.float64)).to(dtype)
    up = torch.randn(rows, inter, device=device, dtype=torch.float64).to(dtype)
    g = gate.double()
    ref = g / (1 + torch.exp(-g)) * up.double()
    bound = (2 * u + (8 + g.abs()) * U32) * ref.abs() + tiny * (1 + up.double().abs())
    out.append(("silu(gate) * up", _excess(ops.act_mul(gate, up), ref, bound)))
    q = (2 * torch.randn(rows, heads, d, device=device, dtype=torch.float64)).to(dtype)
    w = (1 + 0.5 * torch.randn(d, device=device, dtype=torch.float64)).to(dtype)
    positions = torch.randint(0, 40000, (rows, 1), device=device).double()
    freqs = positions / 1e6 ** (torch.arange(0, d, 2, device=device).double() / d)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    n = w.double() * _normed(q)
    c, s = cos.double()[:, None], sin.double()[:, None]
    turned = torch.cat((-n[..., d // 2 :], n[..., : d // 2]), dim=-1)
    ref = n * c + turned * s
    size = (n * c).abs() + (turned * s).abs()
    bound = (3 * u + (d / 2 + 4) * U32 + 2 * u) * size + tiny
    out.append(("q norm + rope", _excess(ops.norm_rope(q, cos, sin, w, 1e-6), ref, bound)))
    return out


def _cache_arg(model) -> str:
    """The forward's name for the cache (`cache` from transformers 5.24, else the old one)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def decode_steps(model, rows: int, prefix: int, steps: int) -> tuple[float, float, float]:
    """(relative logit difference, eager ms, fused ms) of one step of `rows` new tokens over a
    `prefix`-token cache, the cache cropped back after each step so every step sees the same."""
    from transformers import DynamicCache

    from nudgeability.engine.fused.layers import fused_forward

    device = next(model.parameters()).device
    vocab = min(1000, model.config.vocab_size)
    ids = torch.randint(0, vocab, (rows, prefix + 1), device=device)
    cache = DynamicCache()
    name = _cache_arg(model)
    with torch.inference_mode():
        model(input_ids=ids[:, :prefix], use_cache=True, **{name: cache})

        def step(fused: bool) -> tuple[torch.Tensor, float]:
            with fused_forward() if fused else nullcontext():
                if device.type == "cuda":
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    start.record()
                    logits = model(input_ids=ids[:, prefix:], use_cache=True, **{name: cache})
                    end.record()
                    torch.cuda.synchronize()
                    ms = start.elapsed_time(end)
                else:  # the dry run
                    t0 = time.perf_counter()
                    logits = model(input_ids=ids[:, prefix:], use_cache=True, **{name: cache})
                    ms = 1e3 * (time.perf_counter() - t0)
            cache.crop(-1)  # the step's one token (a negative length: 5.17 and 5.25 alike)
            return logits.logits.float(), ms

        times = {False: [], True: []}
        last = {}
        for i in range(steps + 2):
            for fused in (False, True):  # interleaved: a drifting clock costs both alike
                last[fused], ms = step(fused)
                if i >= 2:
                    times[fused].append(ms)
    scale = last[False].abs().max()
    rel = ((last[True] - last[False]).abs().max() / scale).item()
    return rel, statistics.median(times[False]), statistics.median(times[True])


def section(deadline: float, *, dry_run: bool = False, progress=None) -> list[Row]:
    """The rows of this section (see the module docstring)."""
    from nudgeability.engine.fused import layers, triton_ops

    refused = triton_refusal("fused kernels", dry_run, triton_ops.available())
    if refused:
        return refused
    device = torch.device("cpu" if dry_run else "cuda")
    widths = DRY_WIDTHS if dry_run else WIDTHS
    rows: list[Row] = []
    low = torch.float16 if dry_run else torch.bfloat16  # the interpreter's bf16 is wrong
    for dtype in (low, torch.float32):
        for m in (1, 3) if dry_run else ROWS:
            if time.monotonic() > deadline:
                rows.append((f"kernels, {dtype}, {m} rows", "skipped: the section's time ran out"))
                continue
            for name, excess in kernel_checks(device, dtype, m, widths):
                verdict = "within" if excess <= 1 else "BEYOND"
                rows.append(
                    (
                        f"{name}, {str(dtype)[6:]}, {m} rows",
                        f"error / bound {excess:.2f} ({verdict})",
                    )
                )
        if progress:
            progress(rows)
    from .engine import build_model

    shape = decoder_sizes(
        widths["hidden"], widths["intermediate"], widths["heads"], 8 if not dry_run else 1,
        widths["head_dim"], num_hidden_layers=2 if dry_run else LAYERS,
        vocab_size=512 if dry_run else 151936, max_position_embeddings=4096,
    )  # fmt: skip
    model = build_model(shape, device, torch.float32 if dry_run else torch.bfloat16)
    layers.fuse(model)
    for m in (1, 3) if dry_run else ROWS:
        check = f"decode step, {m} rows after {PREFIX if not dry_run else 8} tokens, fused vs eager"
        if time.monotonic() > deadline:
            rows.append((check, "skipped: the section's time ran out"))
            continue
        rel, eager, fused = decode_steps(model, m, 8 if dry_run else PREFIX, 2 if dry_run else 10)
        rows.append(
            (
                check,
                f"logits differ by {rel:.2e} of the largest; eager {eager:.2f} ms, fused "
                f"{fused:.2f} ms ({eager / fused:.2f}x)",
            )
        )
        if progress:
            progress(rows)
    return rows
