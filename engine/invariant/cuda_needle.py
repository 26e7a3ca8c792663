"""Whether this GPU keeps a sequence's logits independent of the batch: the needle on the run's
own engine, measured before the stream is taken on CUDA (splice/run/schedule.py).

On CUDA the engine's invariant mode (engine/invariant/cuda/) fixes every launch plan by the
weights' shapes, never by the rows of a step; what it cannot promise by construction (a library
kernel's internals, a driver's choice) this needle asks the card. It runs the engine the run
computes with, built by the caller with the run's own options (graphed decode, its buckets,
fused layers; splice/run/engine_build.py `run_engine`) on a small KV budget, and compares one
prompt's logits, step by step, alone and among others placed so that the step's rows fall on
either side of the decode buckets 16/17, 32/33 and 64/65 (`CROSSINGS`), and once beside a
prompt longer than a step's prefill budget, whose prefill is split over the needle's steps
(`SPLIT`). Any difference in any bit fails it.

The answer is a property of the kernels and the library code the card runs, chosen by the card,
its driver and libraries, their settings, the engine's options, the model's shapes and dtypes and
this package's code, never by the values in the tensors. So `cached_cuda_check` keeps it on disk
beside the CPU needle's (engine/invariant/needle.py `kept`) under a key of exactly those
(`cuda_key`): the device's name, compute capability and SM count; the driver's version; torch's
CUDA version and the versions of the NVIDIA libraries installed beside it or mapped into the
process (cuBLAS, cuDNN, ...); Triton's version; the TF32 and reduced-precision settings; every
CUBLAS, NVIDIA, CUDA, TRITON and TORCH environment setting; the engine options; the model's
config, shapes and dtypes; the package's sources hash. One card of the same kind with the same software answers the same; any
other is another key, and checks again.
"""

from __future__ import annotations

import gc
import importlib.metadata
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from nudgeability.engine.invariant.needle import (
    CACHE_FORMAT,
    OTHER_TOKENS,
    STEPS,
    InvarianceCheck,
    Needle,
    code_hash,
    kept,
    model_key,
    settings,
)

# decode steps of these many rows: either side of the buckets 16, 32 and 64
# (engine/attention/decode_buckets.py), where a kernel that read M would change plan
CROSSINGS = (16, 17, 32, 33, 64, 65)
SPLIT = "split"  # the needle beside a prompt whose prefill takes more than one step
BATCHES = (*CROSSINGS, SPLIT)
# The needle's KV budget (token slots): 65 short prompts, or the needle and one prompt of a
# step's prefill budget and a little more (2,048 by default), each with its new tokens.
NEEDLE_SLOTS = 4096
NEEDLE_ROWS = max(CROSSINGS)  # its engine's row cap: the buckets up to 128 are its own
_SETTINGS = ("CUBLAS", "NVIDIA_", "CUDA_", "TRITON_", "TORCH_")
DRIVER_VERSION = Path("/proc/driver/nvidia/version")  # Linux's NVIDIA kernel module
MAPS = "/proc/self/maps"
_LIBRARIES = ("libcublas", "libcudnn", "libcudart", "libnvrtc", "libnvJitLink", "libcuda.")


def check_engine(engine, *, seed: int = 0) -> InvarianceCheck:
    """Run the needle (module docstring) on `engine`, a fresh engine of the run's options."""
    start = time.monotonic()
    needle = Needle(engine, seed)
    differing: list[int | str] = [n for n in CROSSINGS if needle.differs_among(n)]
    # the needle first: its prefill and the long prompt's first part share a step, its decode
    # steps the rest of that prefill
    if needle.differs_beside([needle.random_prompt(split_length(engine))]):
        differing.append(SPLIT)
    device = engine.runner.device
    return InvarianceCheck(
        holds=not differing,
        threads=torch.get_num_threads(),
        batches=BATCHES,
        differing=tuple(differing),
        seconds=time.monotonic() - start,
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else device.type,
    )


def split_length(engine) -> int:
    """A prompt longer than what one step prefills beside the needle: its prefill is split."""
    length = engine.prefill_tokens + OTHER_TOKENS
    if engine.runner.max_positions:
        length = min(length, engine.runner.max_positions - STEPS)
    return length


def cached_cuda_check(
    model: torch.nn.Module, make_engine: Callable[[], object], options: dict
) -> InvarianceCheck:
    """`check_engine(make_engine())`, read from disk when this machine already answered it for
    the same `cuda_key(model, options)` (module docstring), else run and kept. `options`: the
    engine options `make_engine` builds with, as JSON values. The engine is freed, and its
    device memory handed back, before this returns: the run's own engine is sized from what is
    free after it."""

    def run() -> InvarianceCheck:
        engine = make_engine()
        try:
            return check_engine(engine)
        finally:
            engine.runner.disengage()
            del engine
            gc.collect()  # its sequences and groups refer to each other
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    return kept(cuda_key(model, options), run)


def cuda_key(model: torch.nn.Module, options: dict) -> dict:
    """Everything that chooses the kernels the CUDA needle runs (module docstring)."""
    device = next(model.parameters()).device
    props = torch.cuda.get_device_properties(device)
    return {
        "format": CACHE_FORMAT,
        "kind": "cuda",
        "batches": list(BATCHES),
        **model_key(model),
        "device": [props.name, [props.major, props.minor], props.multi_processor_count],
        "driver": _driver(),
        "cuda": torch.version.cuda,
        "libraries": _libraries(),
        "torch": torch.__version__,
        "tf32": _tf32(),
        "settings": settings(_SETTINGS),
        "engine": json.loads(json.dumps(options)),  # a copy, as JSON keeps it
        "code": code_hash(),
    }


def _tf32() -> dict:
    """TF32 and reduced-precision settings of cuBLAS and cuDNN, in torch's legacy flags and in
    its per-backend `fp32_precision` (where this torch has it)."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    out = {
        "matmul": matmul.allow_tf32,
        "cudnn": cudnn.allow_tf32,
        "bf16_reduced_precision_reduction": matmul.allow_bf16_reduced_precision_reduction,
        "fp16_reduced_precision_reduction": matmul.allow_fp16_reduced_precision_reduction,
    }
    try:
        out["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    except RuntimeError:  # legacy and per-backend settings mixed: those below say which
        out["float32_matmul_precision"] = None
    for name, backend in (("generic", torch.backends), ("matmul", matmul), ("cudnn", cudnn)):
        out[f"{name}_fp32_precision"] = getattr(backend, "fp32_precision", None)
    return out


def _driver() -> str | None:
    """The NVIDIA kernel driver's version line (Linux), else None."""
    try:
        return DRIVER_VERSION.read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        return None


def _libraries() -> dict[str, str | None]:
    """The versions of Triton, cuDNN and the NVIDIA wheels installed beside torch (cuBLAS,
    cuDNN, NCCL, the CUDA runtime: nvidia-*)."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith("nvidia-") or name in ("triton", "pytorch-triton"):
            found[name] = dist.version
    found["cudnn"] = str(torch.backends.cudnn.version())
    found["mapped"] = _mapped()
    return dict(sorted(found.items()))


def _mapped() -> list[str]:
    """The CUDA libraries mapped into this process (Linux), by file name: a torch built against
    the system's CUDA (a container's) has no NVIDIA wheels, and the real files' names carry their
    full versions (libcublasLt.so.12.4.5.8). cuBLAS is loaded at its first handle, asked for here."""
    if torch.cuda.is_available():
        torch.cuda.current_blas_handle()
    try:
        maps = Path(MAPS).read_text()
    except OSError:
        return []
    names = {Path(line.split()[-1]).name for line in maps.splitlines() if "/" in line}
    return sorted(name for name in names if name.startswith(_LIBRARIES))
