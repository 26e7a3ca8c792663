"""SmolLM2 in FP8 / W4A16 / BNB4, each compute path, against fp32: size, load, peak RSS, decode tok/s.

    python benchmarks/bench_quant.py [--new 32] [--prompt 64] [--threads 1] [--rounds 2]

Writes the three formats from the embedded SmolLM2-135M-Instruct (fp32) with the package's writers,
then, side by side in one run:
- each load in a fresh child process: load time, and peak RSS (VmHWM) right after the load and
  after a first forward pass (every weight then resident);
- baselines measured the same way: a child that only imports torch, and for each format and
  compute path a child that loads and runs a tiny (~1 MB) checkpoint of that format on that path
  — the runtime (Python, torch, transformers, the format's library, numba and its LLVM for the
  fp32 kernels) without the model;
- the memory target: peak RSS <= 1.3 x (quantised tensors + unquantised tensors in fp32) + the
  runtime baseline of that path, checked after the load and after the first forward; the forward is also run
  with glibc's mmap threshold fixed (MALLOC_MMAP_THRESHOLD_=65536), which shows how much of the
  peak is freed dequantisation buffers the allocator keeps (heap fragmentation), not live tensors;
- every format with each compute path (`--quant-compute`: exact, fused, fused-bf16, dense; the
  kernel each took is named; FP8 has no bf16 CPU kernel, so its fused-bf16 is not run again);
- greedy decode tokens/s through `Engine.generate` (ignore_eos, fixed length) at batch 1 and 12:
  decode time = time(prompt + NEW tokens) - time(prompt + 1 token), best of `--rounds` interleaved
  rounds, on `--threads` torch threads (1 by default: on a shared machine, bitsandbytes' OpenMP
  kernels otherwise wait on descheduled threads).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchkit.child_memory import run_child
from benchkit.results import publish

from nudgeability.costs.memory import rss_kib

MiB = 2**20


def child(mode: str, directory: str | None = None, compute: str = "fused") -> None:
    """Runs in a fresh process; prints one JSON line."""
    import torch

    if mode == "torch":
        print(json.dumps({"hwm": rss_kib("VmHWM") * 1024}))
        return
    torch.set_num_threads(1)
    import accelerate  # noqa: F401  (imported before timing: load time is the loading itself)
    from transformers import AutoModelForCausalLM

    from nudgeability.models.quant import load_quantized

    t0 = time.perf_counter()
    if mode == "fp32":
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    else:
        model = load_quantized(directory, compute=compute)
    load_s = time.perf_counter() - t0
    after_load = rss_kib("VmHWM") * 1024
    with torch.no_grad():
        model(torch.arange(3, 35).view(1, -1))
    print(
        json.dumps(
            {"load_s": load_s, "hwm_load": after_load, "hwm_forward": rss_kib("VmHWM") * 1024}
        )
    )


def run_child_env(script: str, env: dict, *args: str) -> dict:
    """`run_child` with extra environment variables."""
    out = subprocess.run(
        [sys.executable, script, "--child", *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def checkpoint_bytes(directory: Path, quantised_layers: set[str]) -> tuple[int, int]:
    """(bytes of the quantised layers' tensors, bytes of the other tensors as loaded in fp32)."""
    from safetensors import safe_open

    quant = plain = 0
    for file in directory.glob("*.safetensors"):
        with safe_open(str(file), "pt") as f:
            for key in f.keys():
                sl = f.get_slice(key)
                numel = 1
                for d in sl.get_shape():
                    numel *= d
                parts = key.split(".")
                if any(".".join(parts[:i]) in quantised_layers for i in range(1, len(parts))):
                    quant += numel * _itemsize(sl.get_dtype())
                else:
                    plain += numel * 4
    return quant, plain


def _itemsize(dtype: str) -> int:
    return {"F8_E4M3": 1, "U8": 1, "I8": 1, "BF16": 2, "F16": 2, "F32": 4, "I32": 4, "I64": 8}[
        dtype
    ]


def computes(name: str) -> list[str]:
    """The compute modes measured for format `name` (FP8's fused-bf16 is its fused)."""
    from nudgeability.models.quant import QUANT_COMPUTES

    return [c for c in QUANT_COMPUTES if not (c == "fused-bf16" and name.startswith("FP8"))]


def decode_rates(models: dict, tokenizer, new: int, prompt_len: int, rounds: int) -> dict:
    """{name: {batch: decode tokens/s}} through Engine.generate, best of `rounds` interleaved rounds."""
    from nudgeability.engine import Engine, SamplingParams

    text = (
        "The history of the printing press begins in the fifteenth century, when movable type " * 20
    )
    base = tokenizer(text)["input_ids"][:prompt_len]
    best: dict = {name: {} for name in models}
    for _ in range(rounds):
        for name, model in models.items():
            engine = Engine(model, tokenizer)
            for batch in (1, 12):
                prompts = [
                    base[i:] + base[:i] for i in range(batch)
                ]  # same length, different tokens
                times = {}
                for n in (1, new + 1):
                    t0 = time.perf_counter()
                    outs = engine.generate(
                        prompts, SamplingParams(max_new_tokens=n, ignore_eos=True)
                    )
                    times[n] = time.perf_counter() - t0
                    assert all(len(o.token_ids) == n for o in outs)
                rate = batch * new / max(times[new + 1] - times[1], 1e-9)
                best[name][batch] = max(best[name].get(batch, 0.0), rate)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new", type=int, default=32, help="decode tokens per sequence")
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the decode runs")
    parser.add_argument(
        "--rounds", type=int, default=2, help="interleaved timing rounds (best kept)"
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return

    import torch

    from nudgeability.models.loader import load_model
    from nudgeability.models.quant import (
        compute_paths,
        load_quantized,
        write_bnb4,
        write_fp8,
        write_w4a16,
    )
    from nudgeability.models.quant.loader import scheme_for
    from nudgeability.models.testing.tiny import tiny_model

    torch.set_num_threads(args.threads)
    load_avg = [os.getloadavg()[0]]
    fp32 = load_model("smollm2")
    tiny = tiny_model("llama")
    writers = {
        "FP8 128x128 (bf16 scales)": lambda m, d, t=None: write_fp8(m, d, tokenizer=t),
        "W4A16 group 32 (sym)": lambda m, d, t=None: write_w4a16(m, d, group_size=32, tokenizer=t),
        "BNB4 nf4 + double quant": lambda m, d, t=None: write_bnb4(m, d, tokenizer=t),
    }
    script = str(Path(__file__).resolve())
    base_torch = run_child(script, "torch")["hwm"]
    rows, models, loads, baselines, paths = [], {"fp32": fp32.model}, {}, {}, {}
    fp32_dir = fp32.source.directory
    fp32_size = sum(f.stat().st_size for f in fp32_dir.glob("*.safetensors"))
    with tempfile.TemporaryDirectory() as tmp:
        tiny.save_pretrained(Path(tmp) / "tiny-fp32")
        baselines["fp32"] = run_child(script, "fp32", str(Path(tmp) / "tiny-fp32"))["hwm_forward"]
        loads["fp32"] = run_child(script, "fp32", str(fp32_dir))
        for name, write in writers.items():
            directory = Path(tmp) / name.split()[0]
            write(tiny, Path(tmp) / f"tiny-{name.split()[0]}")
            for compute in computes(name):  # compile (or load) the kernels here, not in a child
                with torch.no_grad():
                    load_quantized(Path(tmp) / f"tiny-{name.split()[0]}", compute=compute)(
                        torch.arange(3, 35).view(1, -1)
                    )
            for compute in computes(name):
                baselines[name, compute] = run_child(
                    script, "quant", str(Path(tmp) / f"tiny-{name.split()[0]}"), compute
                )["hwm_forward"]
            t0 = time.perf_counter()
            write(fp32.model, directory, fp32.tokenizer)
            write_s = time.perf_counter() - t0
            for compute in computes(name):
                loads[name, compute] = run_child(script, "quant", str(directory), compute)
                loads[name, compute]["hwm_forward_fixed"] = run_child_env(
                    script, {"MALLOC_MMAP_THRESHOLD_": "65536"}, "quant", str(directory), compute
                )["hwm_forward"]
            scheme = scheme_for(json.loads((directory / "config.json").read_text()), directory)
            layers = {n for n, m in fp32.model.named_modules() if scheme.quantizes(n, m)}
            quant, plain = checkpoint_bytes(directory, layers)
            size = sum(f.stat().st_size for f in directory.glob("*.safetensors"))
            rows.append((name, size, quant, plain, write_s))
            for compute in computes(name):
                model = load_quantized(directory, compute=compute)
                models[name, compute] = model
                paths[name, compute] = ", ".join(
                    f"{path} x{n}" for by in compute_paths(model).values() for path, n in by.items()
                )
        rates = decode_rates(models, fp32.tokenizer, args.new, args.prompt, args.rounds)
    load_avg.append(os.getloadavg()[0])

    lines = [
        f"SmolLM2-135M-Instruct, CPU, {args.threads} torch thread(s) for decoding (1 in the load children). "
        f"Decode: `Engine.generate`, greedy, ignore_eos, prompt {args.prompt} tokens, {args.new} new tokens, "
        f"best of {args.rounds} interleaved rounds. Each load ran in a fresh child process. Baselines, peak RSS of "
        f"a child: Python + torch {base_torch / MiB:.0f} MiB; fp32 runtime {baselines['fp32'] / MiB:.0f} MiB; "
        "each quantised row's runtime (the same load and forward on a ~1 MB checkpoint of the format, on the "
        f"same path) is in its row. 1-minute load average {load_avg[0]:.1f} before, {load_avg[1]:.1f} after.",
        "",
        "| model | compute (layers) | checkpoint MiB | quantised + unquantised (fp32) MiB | load s | runtime MiB | "
        "peak RSS after load MiB | after 1st forward MiB (fixed mmap threshold) | target MiB | decode tok/s b=1 | "
        "b=12 | vs fp32 b=1 | b=12 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    r32, l32 = rates["fp32"], loads["fp32"]
    lines.append(
        f"| fp32 (transformers from_pretrained) | F.linear | {fp32_size / MiB:.0f} | - | {l32['load_s']:.2f} | "
        f"{baselines['fp32'] / MiB:.0f} | {l32['hwm_load'] / MiB:.0f} | {l32['hwm_forward'] / MiB:.0f} (-) | - | {r32[1]:.1f} | {r32[12]:.1f} | 1.00x | 1.00x |"
    )
    verdicts = []
    for name, size, quant, plain, write_s in rows:
        verdicts.append(
            f"{name}: target = 1.3 x {(quant + plain) / MiB:.0f} MiB + the path's runtime (against "
            f"the Python + torch baseline alone {(1.3 * (quant + plain) + base_torch) / MiB:.0f} MiB). "
            f"Written in {write_s:.1f} s."
        )
        for compute in computes(name):
            ld, r = loads[name, compute], rates[name, compute]
            runtime = baselines[name, compute]
            target = 1.3 * (quant + plain) + runtime
            met = "met" if max(ld["hwm_load"], ld["hwm_forward"]) <= target else "NOT met"
            lines.append(
                f"| {name} | {compute}: {paths[name, compute]} | {size / MiB:.0f} | {quant / MiB:.0f} + "
                f"{plain / MiB:.0f} | {ld['load_s']:.2f} | {runtime / MiB:.0f} | {ld['hwm_load'] / MiB:.0f} | "
                f"{ld['hwm_forward'] / MiB:.0f} ({ld['hwm_forward_fixed'] / MiB:.0f}) | "
                f"{target / MiB:.0f} ({met}) | {r[1]:.1f} | {r[12]:.1f} | "
                f"{r[1] / r32[1]:.2f}x | {r[12] / r32[12]:.2f}x |"
            )
    lines += [
        "",
        *verdicts,
        "",
        "exact dequantises every weight on every forward; fused computes from the quantised storage in fp32 "
        "(this project's SIMD kernels), fused-bf16 with the libraries' bf16 kernels (models/quant/cpu_kernels.py); "
        "dense dequantises once at load (exact, full-precision memory). A loaded checkpoint's tensors stay views of its memory map until first used, so the peak right "
        "after loading is mostly the runtime; the first forward makes every weight resident.",
    ]
    body = "\n".join(lines)
    publish("Quantised checkpoints (benchmarks/bench_quant.py)", body)


if __name__ == "__main__":
    main()
