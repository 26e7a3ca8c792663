"""What the CUDA paths say they run and what they keep, checked on CPU.

- bitsandbytes' CUDA `gemm_4bit` op picks its fused kernel or dequantise + F.linear by rows and
  GPU: `cuda_kernels.bnb_kernel` must name what bitsandbytes' own dispatch (its registered CUDA
  kernel, `bitsandbytes/backends/cuda/ops.py`) does, for an H200's SM count (in a subprocess: importing that
  module registers CUDA kernels and needs a CUDA stream hook that a CPU torch lacks).
- A W4A16 layer on tinygemm keeps the tiled weight and the bf16 scale-and-zero table only (no
  second repacked copy of the weight, no int32 zero points), counted in bytes over every tensor
  its closures keep alive; on meta tensors, where torch's tinygemm tiling has a shape function.
- An fp16 or fp32 model's layer that tinygemm would take is named `triton_w4a16`, recorded.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from nudgeability.models.quant import cuda_kernels
from nudgeability.util import fallbacks

BNB_DISPATCH = r"""
import gc, inspect, json, warnings
import torch
torch._C._cuda_getCurrentRawStream = lambda *a: 0  # a CPU torch lacks it; read at import only
from bitsandbytes.backends.cuda import ops
ops._gpu_dispatch_props = lambda index: (132, 9, 0)  # an H200: 132 SMs, SM90
(dispatch,) = [
    f for f in gc.get_objects()
    if inspect.isfunction(f) and f.__module__ == ops.__name__ and f.__name__ == "_"
    and "use_custom" in f.__code__.co_varnames
]
seen = []
ops._dequant_linear_fallback = lambda *a, **k: seen.append("bnb_dequant_linear")
ops._gemm_4bit_kernel_impl = lambda *a, **k: seen.append("bnb_gemm_4bit_fused")
from nudgeability.models.quant.cuda_kernels import bnb_kernel
rows = [1, 2, 4, 5, 7, 8, 16, 17, 32, 33, 48, 49, 64, 65, 128, 320, 512, 513, 1536, 1537]
out = []
warnings.simplefilter("ignore")
for n, k in [(4096, 4096), (1024, 4096), (12288, 4096), (4096, 12288), (256, 200), (512, 64)]:
    for m in rows:
        for dtype in (torch.bfloat16, torch.float32):
            a = torch.empty(m, k, dtype=dtype)
            dispatch(a, torch.empty(1, dtype=torch.uint8), (n, k), torch.empty(1), 64, "nf4")
            out.append([n, k, m, str(dtype), seen.pop(), bnb_kernel(m, n, k, 64, dtype, None)])
print(json.dumps(out))
"""


def test_the_bnb_path_names_the_kernel_bitsandbytes_dispatches_to():
    pytest.importorskip("bitsandbytes")
    done = subprocess.run(
        [sys.executable, "-c", BNB_DISPATCH], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    cases = json.loads(done.stdout.strip().splitlines()[-1])
    wrong = [c for c in cases if c[4] != c[5]]
    assert wrong == []
    # on an H200 both happen, and one row is the fused kernel
    assert {c[4] for c in cases} == {"bnb_dequant_linear", "bnb_gemm_4bit_fused"}
    assert all(c[4] == "bnb_gemm_4bit_fused" for c in cases if c[2] == 1 and c[1] % 64 == 0)


def _kept(path, inputs) -> dict[int, torch.Tensor]:
    """Every tensor reachable from the path's closures (functions and their cells, recursively)
    that is not one of `inputs` (the layer's own storage)."""
    found, seen = {}, set()

    def walk(obj):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            if not any(obj is t for t in inputs):
                found[id(obj)] = obj
        elif callable(obj) and getattr(obj, "__closure__", None):
            for cell in obj.__closure__:
                walk(cell.cell_contents)
        elif isinstance(obj, (tuple, list)):
            for item in obj:
                walk(item)
        elif isinstance(obj, dict):
            for item in obj.values():
                walk(item)

    walk(path.run)
    walk(getattr(path, "choose", None))
    walk(path.tensors)
    return found


@pytest.mark.parametrize("symmetric", [True, False])
def test_a_tinygemm_layer_keeps_only_what_tinygemm_reads(monkeypatch, symmetric):
    monkeypatch.setattr(cuda_kernels, "tinygemm_reason", lambda *a: None)
    n, k, group = 256, 512, 128
    fields = torch.empty(n, k, dtype=torch.uint8, device="meta")
    scale = torch.empty(n, k // group, dtype=torch.bfloat16, device="meta")
    zp = None if symmetric else torch.empty(n, k // group, dtype=torch.int8, device="meta")
    path = cuda_kernels.w4a16_path(fields, scale, zp, group)
    assert path.name == "tinygemm_int4pack_mm"
    kept = _kept(path, [fields, scale, zp])
    nbytes = sum(t.numel() * t.element_size() for t in kept.values())
    # int4mm.cu: the tiled weight is 4 bits per weight; scales_and_zeros [K/G, N, 2] bf16
    assert nbytes == n * k // 2 + (k // group) * n * 2 * 2, sorted(
        (tuple(t.shape), t.dtype) for t in kept.values()
    )


def test_a_half_precision_model_takes_the_triton_kernel_named_and_recorded(monkeypatch):
    monkeypatch.setattr(cuda_kernels, "tinygemm_reason", lambda *a: None)
    monkeypatch.setattr(cuda_kernels.triton_kernels, "available", lambda: True)
    fallbacks.reset()
    fields = torch.randint(0, 16, (64, 256), dtype=torch.uint8)
    scale = torch.rand(64, 2, dtype=torch.float16)
    path = cuda_kernels.w4a16_path(fields, scale, None, 128, torch.float16)
    assert path.name == "triton_w4a16"
    (taken,) = fallbacks.taken()
    assert taken.path == "tinygemm_int4pack_mm w4a16 [64, 256] g128 sym"
    assert taken.used == "triton_w4a16" and "bf16" in taken.reason
    assert _kept(path, [fields, scale]) != {}  # its own words here (no layer storage was given)
    fallbacks.reset()
