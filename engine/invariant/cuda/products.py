"""Batch-invariant matrix products on CUDA: every product one Triton kernel at `plan.plan`'s tile.

`linear` is an `F.linear` for the model's plain linears and its LM head: the dense kernel of
models/quant/triton_kernels.py (`dense_matmul`, the weight in its own dtype, fp32 sums) at the
tile and K split the weight's shape fixes, then the bias added elementwise. `quantised` is the
same for a quantised linear of models/quant/: its format's Triton kernel on the layer's own
stored tensors (`cuda_kernels.triton_call`), at the same plan. In this mode no product calls
cuBLAS, tinygemm, `_scaled_mm` or bitsandbytes, and none is self-checked: each of those picks
its code path by the rows or the card, and the self-check's verdict is keyed by the row class
(models/quant/self_check.py), so a row's bits would follow the batch. A layer that no Triton
kernel takes (8-bit or activation-ordered W4A16) dequantises its weight and runs `linear`,
recorded once (`util.fallbacks`).

What the plan guarantees is the kernel's arithmetic: the same instructions, in the same order,
for every row, whatever the batch. Which bits those instructions give is the GPU's: the same
records from every card of one architecture with one software stack, not across architectures
(another MMA instruction rounds otherwise). engine/invariant/linears.py routes a model's
products here inside its invariant context; tests/engine/invariant/cuda/ checks the
construction on CPU tensors under Triton's interpreter.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nudgeability.engine.invariant.cuda.plan import plan
from nudgeability.models.quant import cuda_kernels, triton_kernels
from nudgeability.util import fallbacks

EXACT = "exact dequantisation + the invariant dense product"


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)` by the dense Triton kernel at `plan(*weight.shape)`; integer
    inputs and weights that are not one matrix go to torch's own."""
    if not x.is_floating_point() or x.dim() == 0 or weight.dim() != 2:
        return F.linear(x, weight, bias)
    n_out, width = weight.shape
    flat = x.reshape(-1, width)
    if flat.shape[0] == 0:
        out = flat.new_empty(0, n_out)
    else:
        out = triton_kernels.dense_matmul(flat, weight, plan(n_out, width))
    if bias is not None:
        out = out + bias
    return out.view(*x.shape[:-1], n_out)


def quantised(layer, x: torch.Tensor) -> torch.Tensor:
    """y [M, N] (no bias) of a quantised linear of models/quant/ for x [M, K]: its Triton kernel
    at the plan (`prepare`), or the exact path through `linear` where no Triton kernel takes the
    layer."""
    kernel = layer.__dict__.get("_invariant_run") or prepare(layer)
    if x.shape[0] == 0:
        return x.new_empty(0, layer.out_features)
    return kernel(x)


def prepare(layer):
    """Choose `layer`'s kernel and make the tensors it reads (fp32 scales, int8 zero points),
    once, kept on the layer (`layer.invariant_kernel` names it with its tile). The engine does
    it when it adopts the model (engine/invariant/linears.py `adopt`), eagerly: made inside a
    CUDA graph's capture, those tensors would stay unwritten until its first replay."""
    kernel = layer.__dict__.get("_invariant_run")
    if kernel is None:
        kernel = layer.__dict__["_invariant_run"] = _kernel(layer)
    return kernel


def _kernel(layer):
    n_out, width = layer.out_features, layer.in_features
    found = cuda_kernels.triton_call(layer)
    if isinstance(found, str):
        fallbacks.record(
            f"invariant Triton kernel, {layer.format_name} [{n_out}, {width}]", EXACT, found
        )
        layer.invariant_kernel = "exact"
        return layer.exact_no_bias
    name, call = found
    tile = plan(n_out, width)
    layer.invariant_kernel = f"{name}[{tile.name}]"
    return lambda x: call(x, tile)


def kernels(model: torch.nn.Module) -> dict[str, dict[str, int]]:
    """{format: {kernel with its tile: number of layers}} over the quantised linears of `model`
    prepared for the invariant products ({} before that): what a run's manifest can record in
    place of the load-time paths (`compute.compute_paths`), which these replace."""
    counts: dict[str, dict[str, int]] = {}
    for module in model.modules():
        name = module.__dict__.get("invariant_kernel")
        if name is not None:
            per = counts.setdefault(module.format_name, {})
            per[name] = per.get(name, 0) + 1
    return {fmt: dict(sorted(c.items())) for fmt, c in sorted(counts.items())}
