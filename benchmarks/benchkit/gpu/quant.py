"""GPU section of issue 22: the fused CUDA paths against the exact ones, and decode-step speed.

    python benchmarks/gpu_check.py --only quant [--budget 480]

`section(deadline, dry_run=False)` returns rows `(check, result)` for benchmarks/gpu_check.py's
table (stopping when `time.monotonic()` passes `deadline`, and saying what it skipped); with
`dry_run` the same on CPU, on small layers and a tiny model, timed by the wall clock. It needs only torch, Triton,
transformers and this repository: the layers are built with the project's own packing
(`quantize_fp8_block`, int4 fields packed as compressed-tensors int32 words, NF4 codes packed
as bitsandbytes does), never with compressed-tensors or bitsandbytes, and the NF4 reference is
the flat decoding `table[code] * absmax` (bitsandbytes' formula) written here.

1. Layers of Qwen3-8B's shapes in each format, random weights: the fused path (the kernel each
   took is named) against the exact dequantise-then-`F.linear`, at 1, 12 and 64 rows, bf16.
2. A random-init Qwen3-8B-shaped model (36 layers; bf16), each format swapped into it in turn:
   one decode step (B new tokens against a 256-token cache) at B = 1, 12, 64, median of CUDA-event
   timings, against the bf16 model and against the bandwidth floor of costs/floor.py
   (every weight as stored but the embedding table, the LM head in bf16, the KV cache, over the
   copy bandwidth measured here: the one floor engine.py uses too).

NF4 needs bitsandbytes for its exact reference and its CUDA kernel: where it does not import
(the GPU image has none) its rows say so and are skipped.
"""

from __future__ import annotations

import importlib
import statistics
import time
import types

import torch

from nudgeability.costs.floor import copy_bandwidth, step_floor_s
from nudgeability.models.testing.tiny import QUANT_PACKABLE_QWEN3, decoder_sizes

ROWS = (1, 12, 64)
FORMATS = ("fp8", "w4a16", "nf4")
FORMAT_NAMES = {"fp8": "fp8", "w4a16": "w4a16", "nf4": "bnb4"}  # QuantLinearBase.format_name
# Qwen3-8B (config.json of Qwen/Qwen3-8B)
QWEN3_8B = decoder_sizes(4096, 12288, 32, 8, 128, num_hidden_layers=36, vocab_size=151936)
# bitsandbytes' NF4 code table (`bitsandbytes.functional.get_4bit_type("nf4")`), in code order
NF4 = (
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
)  # fmt: skip
W4_GROUP = 128
NF4_BLOCK = 64
PREFIX = 256


def quantised_layer(fmt: str, weight: torch.Tensor):
    """A quantised linear of `weight` [N, K] in format `fmt`, on its device, by this project's packing."""
    from nudgeability.models.quant import BnB4Linear, FP8BlockLinear, PackQuantizedLinear
    from nudgeability.models.quant.cuda_kernels import _repack_int32
    from nudgeability.models.quant.fp8_linear import quantize_fp8_block

    n, k = weight.shape
    w = weight.detach().float()
    if fmt == "fp8":
        q, scale_inv = quantize_fp8_block(w, (128, 128), torch.bfloat16)
        return FP8BlockLinear(q, scale_inv, (128, 128))
    if fmt == "w4a16":  # symmetric int4, groups of 128, bf16 scales (Gemma 4's W4A16 layout)
        groups = w.view(n, k // W4_GROUP, W4_GROUP)
        scale = (groups.abs().amax(-1) / 7).clamp_min(1e-8).to(torch.bfloat16)
        q = torch.round(groups / scale.float()[..., None]).clamp(-8, 7).view(n, k)
        packed = _repack_int32((q + 8).to(torch.uint8))
        shape = torch.tensor([n, k], device=w.device)
        return PackQuantizedLinear(packed, scale, shape, 4)
    if fmt == "nf4":  # no double quantisation: bitsandbytes (for its nested blocks) is not here
        flat = w.reshape(-1, NF4_BLOCK)
        absmax = flat.abs().amax(-1).clamp_min(1e-8)
        table = torch.tensor(NF4, device=w.device)
        codes = torch.bucketize(flat / absmax[:, None], (table[1:] + table[:-1]) / 2).flatten()
        packed = ((codes[0::2] << 4) | codes[1::2]).to(torch.uint8).view(-1, 1)
        state = types.SimpleNamespace(
            shape=torch.Size((n, k)), quant_type="nf4", blocksize=NF4_BLOCK,
            dtype=weight.dtype, absmax=absmax, code=table, state2=None, offset=None,
        )  # fmt: skip
        return BnB4Linear(packed, state)
    raise ValueError(f"unknown format {fmt!r}")


def exact_weight(fmt: str, layer, dtype: torch.dtype) -> torch.Tensor:
    """The exact dequantised weight in `dtype` (for NF4 by the flat formula, as bitsandbytes)."""
    if fmt != "nf4":
        return layer.dequantize(dtype)
    flat = layer.weight.flatten()
    codes = torch.stack((flat >> 4, flat & 15), -1).flatten()[
        : layer.out_features * layer.in_features
    ]
    values = layer.weight_quant_map[codes.long()].view(-1, layer.blocksize)
    return (values * layer.weight_absmax[:, None]).view(layer.out_features, -1).to(dtype)


def missing_library(fmt: str) -> str | None:
    """Why `fmt`'s layers cannot be checked here (a library that does not import), or None."""
    if fmt != "nf4":
        return None
    try:
        importlib.import_module("bitsandbytes")
    except ImportError as exc:  # the GPU image has none: NF4's reference and kernel are its own
        return f"bitsandbytes does not import ({exc})"
    return None


def layer_checks(device, shapes, rows=ROWS, dtype=torch.bfloat16, deadline=float("inf")):
    """[(format, [N, K], path, rows, max |fused - exact| / max |exact|)], or what was skipped."""
    out, gen = [], torch.Generator(device=device).manual_seed(0)
    for fmt in FORMATS:
        if missing_library(fmt):
            continue
        for n, k in shapes:
            if time.monotonic() > deadline:
                return out, f"layer checks from {fmt} [{n}, {k}] on"
            weight = torch.randn(n, k, generator=gen, device=device) * 0.02
            layer = quantised_layer(fmt, weight.to(dtype))
            why = layer.configure("fused", dtype)
            reference = exact_weight(fmt, layer, dtype)
            for m in rows:
                x = torch.randn(m, k, generator=gen, device=device).to(dtype)
                with torch.no_grad():
                    got, want = layer(x).float(), torch.nn.functional.linear(x, reference).float()
                rel = ((got - want).abs().max() / want.abs().max()).item()
                out.append((fmt, [n, k], why or layer.compute_path, m, rel))
    return out, None


def swap(model, fmt: str, compute: str = "fused") -> dict:
    """Replace every linear but lm_head by its `fmt` layer (computing `compute`); returns the
    originals."""
    originals = {}
    for name, module in list(model.named_modules()):
        if isinstance(module, torch.nn.Linear) and not name.endswith("lm_head"):
            layer = quantised_layer(fmt, module.weight)
            layer.configure(compute, module.weight.dtype)
            originals[name] = module
            model.set_submodule(name, layer)
    return originals


def restore(model, originals: dict) -> None:
    for name, module in originals.items():
        model.set_submodule(name, module)


def stored_bytes(model) -> int:
    """Bytes a decode step reads from weights (costs/floor.py `weight_read_bytes`)."""
    from nudgeability.costs.floor import weight_read_bytes

    return weight_read_bytes(model)


def step_ms(model, rows: int, steps: int = 8, prefix: int = PREFIX) -> float:
    """Median CUDA-event time of one decode step of `rows` sequences after a PREFIX-token prefill."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    cache = DynamicCache()
    ids = torch.randint(0, min(1000, model.config.vocab_size), (rows, prefix), device=device)
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        times = []
        token = ids[:, -1:]
        for i in range(steps + 2):
            if device.type == "cuda":
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                model(token, past_key_values=cache, use_cache=True)
                end.record()
                torch.cuda.synchronize()
                ms = start.elapsed_time(end)
            else:  # the dry run
                t0 = time.perf_counter()
                model(token, past_key_values=cache, use_cache=True)
                ms = 1e3 * (time.perf_counter() - t0)
            if i >= 2:
                times.append(ms)
    return statistics.median(times)


def build_model(device, **config):
    from transformers import AutoModelForCausalLM, Qwen3Config

    cfg = Qwen3Config(**{**QWEN3_8B, **config})
    with torch.device(device):
        return AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()


Row = tuple[str, str]
# the dry run's stand-ins: small layers, a tiny model, a short cache
DRY_LAYERS = [(256, 128), (128, 256)]
DRY_MODEL = QUANT_PACKABLE_QWEN3
DRY_PREFIX = 16


def section(deadline: float, *, dry_run: bool = False, progress=None) -> list[Row]:
    """The rows of this section (see the module docstring)."""
    if not dry_run and not torch.cuda.is_available():
        return [("quant on CUDA", "skipped: no CUDA device (use --dry-run on CPU)")]
    device = torch.device("cpu" if dry_run else "cuda")
    h, i = QWEN3_8B["hidden_size"], QWEN3_8B["intermediate_size"]
    shapes = DRY_LAYERS if dry_run else [(h, h), (i, h), (h, i)]
    rows: list[Row] = [
        (f"{fmt} layers and decode", f"skipped: {why}")
        for fmt in FORMATS
        if (why := missing_library(fmt))
    ]
    checks, skipped = layer_checks(device, shapes, deadline=deadline)
    rows += [
        (f"{f} {s} fused against exact, {m} rows ({p})", f"max abs diff / max abs exact {r:.2e}")
        for f, s, p, m, r in checks
    ]
    if skipped:
        return rows + [("layer checks and decode timings", f"skipped (time): {skipped} on")]
    bandwidth = copy_bandwidth(device, 1 / 64 if dry_run else 2.0)
    model = build_model(device, **(DRY_MODEL if dry_run else {}))
    prefix = DRY_PREFIX if dry_run else PREFIX
    variants = {"bf16": None, **{f: f for f in FORMATS if not missing_library(f)}}
    base = {}
    for name, fmt in variants.items():
        if time.monotonic() > deadline:
            rows.append((f"decode step, {name} on", "skipped: the section's time ran out"))
            break
        originals = swap(model, fmt) if fmt else {}
        try:
            weights = stored_bytes(model)
            for m in ROWS:
                check = f"decode step, {name}, {m} rows after {prefix} tokens"
                try:
                    ms = step_ms(model, m, prefix=prefix)
                except Exception as exc:
                    rows.append((check, f"failed: {type(exc).__name__}: {exc}"))
                    continue
                base.setdefault(m, ms) if fmt is None else None
                floor = 1e3 * step_floor_s(model, prefix * m, m, bandwidth)
                vs = f"{base[m] / ms:.2f}x bf16, " if m in base else ""
                rows.append(
                    (
                        check,
                        f"{ms:.2f} ms ({vs}{ms / floor:.2f} of floor; weights {weights / 1e9:.3f} GB)",
                    )
                )
        finally:
            restore(model, originals)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows
