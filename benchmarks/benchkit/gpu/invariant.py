"""GPU section: the batch-invariant GEMMs (engine/invariant/cuda/products.py), bitwise across
the batch and timed against the library's own products.

    python benchmarks/gpu_check.py --only invariant

1. *M-sweep, bitwise*: for a Qwen3-0.6B-shaped layer in bf16, FP8 and W4A16 (NF4 too where
   bitsandbytes imports: the library path's exact weight needs it), 511 random rows through
   one call, then every batch of M = 1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 257
   rows of them from offset 0 and from offset 7 (so every row also sits elsewhere in its 64-row tile): each row's output must
   equal, bit for bit, its output among the 511. The row says how many rows differed (0 is the
   construction's promise) and, for the same sweep through the library's kernels (cuBLAS
   `F.linear`, the layer's own fused path: `_scaled_mm`/Triton at `tile_for`, tinygemm), how
   many differed there.
2. *Speed*: at M = 16, 64 and 256 rows, the invariant product against the library's on the same
   layer (median of CUDA-event timings), for each Qwen3-0.6B product shape.

With `dry_run`, the same on CPU under `TRITON_INTERPRET=1` on small layers, in fp16 (the
interpreter's bf16 is wrong), a shorter sweep, timed by the wall clock (no figure is a GPU's).
"""

from __future__ import annotations

import statistics
import time

import torch

from .check import Row, triton_refusal
from .quant import missing_library, quantised_layer

SWEEP = (1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 257)
DRY_SWEEP = (1, 17, 65)
TIMED = (16, 64, 256)
# Qwen3-0.6B (config.json of Qwen/Qwen3-0.6B): hidden 1024, intermediate 3072, 16 heads and 8 KV
# heads of 128; [N, K] of q, o, gate/up, down
SHAPES = {"q_proj": (2048, 1024), "o_proj": (1024, 2048), "gate_proj": (3072, 1024)}
SHAPES["down_proj"] = (1024, 3072)
DRY_SHAPES = {"o_proj": (128, 256)}
FORMATS = ("bf16", "fp8", "w4a16", "nf4")


def _kernels(fmt: str, weight: torch.Tensor, dtype: torch.dtype):
    """(invariant run, library run, library's name) for one layer of `weight` in `fmt`."""
    from nudgeability.engine.invariant.cuda import products

    if fmt == "bf16":
        w = weight.to(dtype)
        return (
            (lambda x: products.linear(x, w)),
            (lambda x: torch.nn.functional.linear(x, w)),
            "F.linear",
        )
    layer = quantised_layer(fmt, weight.to(dtype))
    layer.configure("fused", dtype)
    return (lambda x: products.quantised(layer, x)), (lambda x: layer(x)), layer.compute_path


def differing_rows(run, x: torch.Tensor, sweep) -> int:
    """Rows whose output in a batch of M (sweep) from offset 0 or 7 differs from their output
    among all of x's rows."""
    with torch.no_grad():
        every = run(x)
        bad = 0
        for offset in (0, 7):
            for m in sweep:
                y = run(x[offset : offset + m])
                bad += int((y != every[offset : offset + m]).any(dim=1).sum())
    return bad


def median_ms(run, x: torch.Tensor, reps: int, warm: int) -> float:
    times = []
    with torch.no_grad():
        for i in range(reps + warm):
            if x.is_cuda:
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                start.record()
                run(x)
                end.record()
                torch.cuda.synchronize()
                ms = start.elapsed_time(end)
            else:
                t0 = time.perf_counter()
                run(x)
                ms = 1e3 * (time.perf_counter() - t0)
            if i >= warm:
                times.append(ms)
    return statistics.median(times)


def section(deadline: float, *, dry_run: bool = False, progress=None) -> list[Row]:
    """The rows of this section (see the module docstring)."""
    from nudgeability.models.quant import triton_kernels

    refused = triton_refusal("invariant GEMMs", dry_run, triton_kernels.available())
    if refused:
        return refused
    device = torch.device("cpu" if dry_run else "cuda")
    dtype = torch.float16 if dry_run else torch.bfloat16
    shapes = DRY_SHAPES if dry_run else SHAPES
    sweep, rows_max = (DRY_SWEEP, 80) if dry_run else (SWEEP, 511)
    gen = torch.Generator(device=device).manual_seed(0)
    rows: list[Row] = []
    for name, (n, k) in shapes.items():
        weight = torch.randn(n, k, generator=gen, device=device) * 0.02
        x = torch.randn(rows_max, k, generator=gen, device=device).to(dtype)
        for fmt in FORMATS:
            check = f"{fmt} {name} [{n}, {k}]"
            if why := missing_library(fmt):  # NF4's exact weight and self-check need it
                rows.append((check, f"skipped: {why}"))
                continue
            if time.monotonic() > deadline:
                rows.append((check, "skipped: the section's time ran out"))
                continue
            invariant, library, library_name = _kernels(fmt, weight, dtype)
            # the sweep on the first shape only: its bits, not its speed, are the shape's
            if name == next(iter(shapes)):
                ours, theirs = (
                    differing_rows(invariant, x, sweep),
                    differing_rows(library, x, sweep),
                )
                rows.append(
                    (
                        f"{check}: rows differing from their bits among {rows_max}, M in {sweep[0]}..{sweep[-1]}",
                        f"invariant {ours} ({'bitwise' if ours == 0 else 'NOT INVARIANT'}); "
                        f"{library_name} {theirs}",
                    )
                )
            reps, warm = (1, 0) if dry_run else (20, 3)
            for m in (3,) if dry_run else TIMED:
                ours = median_ms(invariant, x[:m], reps, warm)
                theirs = median_ms(library, x[:m], reps, warm)
                rows.append(
                    (
                        f"{check}, {m} rows",
                        f"invariant {ours:.3f} ms, {library_name} {theirs:.3f} ms ({ours / theirs:.2f}x)",
                    )
                )
        if progress:
            progress(rows)
    return rows
