"""GPU section of issue 22: the fused CUDA paths against the exact ones, and decode-step speed.

    python benchmarks/gpu_quant.py [--minutes 8]

`section(deadline)` returns the Markdown body for benchmarks/gpu_check.py (stopping when
`time.monotonic()` passes `deadline`, and saying what it skipped). It needs only torch, Triton,
transformers and this repository: the layers are built with the project's own packing
(`quantize_fp8_block`, int4 fields packed as compressed-tensors int32 words, NF4 codes packed
as bitsandbytes does), never with compressed-tensors or bitsandbytes, and the NF4 reference is
the flat decoding `table[code] * absmax` (bitsandbytes' formula) written here.

1. Layers of Qwen3-8B's shapes in each format, random weights: the fused path (the kernel each
   took is named) against the exact dequantise-then-`F.linear`, at 1, 12 and 64 rows, bf16.
2. A random-init Qwen3-8B-shaped model (36 layers; bf16), each format swapped into it in turn:
   one decode step (B new tokens against a 256-token cache) at B = 1, 12, 64, median of CUDA-event
   timings, against the bf16 model and against the bandwidth floor: the bytes a step must read
   (every weight as stored, the LM head in bf16, the KV cache) over the copy bandwidth measured
   here.
"""

from __future__ import annotations

import argparse
import statistics
import time
import types

import torch

ROWS = (1, 12, 64)
FORMATS = ("fp8", "w4a16", "nf4")
# Qwen3-8B (config.json of Qwen/Qwen3-8B)
QWEN3_8B = dict(
    hidden_size=4096,
    intermediate_size=12288,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
)
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


def layer_checks(device, shapes, rows=ROWS, dtype=torch.bfloat16, deadline=float("inf")):
    """[(format, [N, K], path, rows, max |fused - exact| / max |exact|)], or what was skipped."""
    out, gen = [], torch.Generator(device=device).manual_seed(0)
    for fmt in FORMATS:
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


def swap(model, fmt: str) -> dict:
    """Replace every linear but lm_head by its `fmt` layer (fused); returns the originals."""
    originals = {}
    for name, module in list(model.named_modules()):
        if isinstance(module, torch.nn.Linear) and not name.endswith("lm_head"):
            layer = quantised_layer(fmt, module.weight)
            layer.configure("fused", module.weight.dtype)
            originals[name] = module
            model.set_submodule(name, layer)
    return originals


def restore(model, originals: dict) -> None:
    for name, module in originals.items():
        model.set_submodule(name, module)


def stored_bytes(model) -> int:
    """Bytes a decode step reads from weights: every buffer and parameter, but the embedding."""
    total = 0
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        if "embed_tokens" not in name and tensor is not None:
            total += tensor.numel() * tensor.element_size()
    return total


def step_ms(model, rows: int, steps: int = 8) -> float:
    """Median CUDA-event time of one decode step of `rows` sequences after a PREFIX-token prefill."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    cache = DynamicCache()
    ids = torch.randint(0, 1000, (rows, PREFIX), device=device)
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        times = []
        token = ids[:, -1:]
        for i in range(steps + 2):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(token, past_key_values=cache, use_cache=True)
            end.record()
            torch.cuda.synchronize()
            if i >= 2:
                times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth(device) -> float:
    """Bytes/s of a 2 GiB device-to-device copy (read + write), median of 5."""
    a = torch.empty(2**30, dtype=torch.bfloat16, device=device)
    b = torch.empty_like(a)
    times = []
    for _ in range(6):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        b.copy_(a)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * a.numel() * a.element_size() / statistics.median(times[1:])


def build_model(device, **config):
    from transformers import AutoModelForCausalLM, Qwen3Config

    cfg = Qwen3Config(**{**QWEN3_8B, **config})
    with torch.device(device):
        return AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()


def section(deadline: float) -> str:
    """The Markdown body of this section (see the module docstring)."""
    if not torch.cuda.is_available():
        return "No CUDA device: nothing measured."
    device = torch.device("cuda")
    lines = [
        f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, bf16 activations.",
        "",
    ]
    h, i = QWEN3_8B["hidden_size"], QWEN3_8B["intermediate_size"]
    checks, skipped = layer_checks(device, [(h, h), (i, h), (h, i)], deadline=deadline)
    lines += [
        "| format | layer [N, K] | fused path | rows | max abs diff / max abs exact |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {f} | {s} | {p} | {m} | {r:.2e} |" for f, s, p, m, r in checks]
    if skipped:
        return "\n".join(lines + ["", f"Skipped (time): {skipped}, and the decode timings."])
    bandwidth = copy_bandwidth(device)
    model = build_model(device)
    layers, kv_heads = QWEN3_8B["num_hidden_layers"], QWEN3_8B["num_key_value_heads"]
    kv_bytes = 2 * layers * kv_heads * QWEN3_8B["head_dim"] * 2 * PREFIX  # K and V, bf16, per row
    variants = {"bf16": None, **{fmt: fmt for fmt in FORMATS}}
    lines += [
        "",
        f"Random-init Qwen3-8B shape (36 layers), one decode step after a {PREFIX}-token prefill; "
        f"floor = bytes read / measured copy bandwidth {bandwidth / 1e12:.2f} TB/s.",
        "",
        "| model | weights read GB | "
        + " | ".join(f"{m} rows ms (vs bf16, vs floor)" for m in ROWS)
        + " |",
        "|---|---|" + "---|" * len(ROWS),
    ]
    base = {}
    for name, fmt in variants.items():
        if time.monotonic() > deadline:
            lines.append(f"\nSkipped (time): decode timings from {name} on.")
            break
        originals = swap(model, fmt) if fmt else {}
        weights = stored_bytes(model)
        cells = []
        for m in ROWS:
            ms = step_ms(model, m)
            base.setdefault(m, ms) if fmt is None else None
            floor = (weights + kv_bytes * m) / bandwidth * 1e3
            cells.append(f"{ms:.2f} ({base[m] / ms:.2f}x, {ms / floor:.2f} of floor)")
        lines.append(f"| {name} | {weights / 1e9:.2f} | " + " | ".join(cells) + " |")
        restore(model, originals)
        torch.cuda.empty_cache()
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=8.0, help="time budget")
    args = parser.parse_args()
    print(section(time.monotonic() + 60 * args.minutes))


if __name__ == "__main__":
    main()
