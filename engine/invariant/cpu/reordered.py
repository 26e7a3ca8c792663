"""A model's fp32 linears held only in oneDNN's layout: the weights' memory once, not twice.

The invariant products (engine/invariant/cpu/products.py) run a Parameter's product from a copy of its column
slices reordered into oneDNN's blocked layout, kept beside the Parameter (faster per call than
the plain layout), at the cost of the weights' size again. A run that loaded its model itself
and hands it to nobody else (splice/run/prepare.py) needs only the copy: `reorder_linears`
replaces each fp32 `nn.Linear` on the CPU by a `ReorderedLinear` holding just the reordered
slices, and the dense weight is freed. Its products are the very calls `products.linear` makes
from the kept copy (`reorder_slices`, `onednn_product`), so the bits are the same by
construction (tests/engine/invariant/test_reordered.py), at any core count.

What is given up: the module has no `weight` to read, write, save or move; it runs on the CPU in
fp32 only, and not under `torch.compile` (inductor lowers oneDNN's matmul only for a frozen
constant weight). A linear whose weight is shared with an embedding stays as it is, since the
embedding's lookups need the dense table, and so does one wider than the invariant products
reorder (`invariant.reorderable`: the LM head, tied or not, runs from its plain layout).
"""

from __future__ import annotations

import torch

from nudgeability.engine.invariant.cpu.products import onednn_product
from nudgeability.engine.invariant.cpu.weights import (
    ONEDNN,
    product_slices,
    reorder_slices,
    reorderable,
)
from nudgeability.engine.invariant.linears import InvariantLinear, invariant_forward


class ReorderedLinear(torch.nn.Module):
    """`nn.Linear` of an fp32 CPU weight kept only as its `product_slices` in oneDNN's layout."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        # a plain attribute, not a buffer: oneDNN's layout has no storage to save or share
        # sliced for the cores this process's products will use (`invariant_forward` gives
        # them torch's threads); at any other count the bits are the same (`product_slices`)
        slices = product_slices(linear.out_features, linear.in_features, torch.get_num_threads())
        self.parts = reorder_slices(linear.weight, slices)
        self.bias = linear.bias
        # what a forward reads of the weight, which no parameter or buffer holds now
        # (costs/floor.py `weight_read_bytes` counts it)
        self.read_bytes = linear.weight.numel() * linear.weight.element_size()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or x.dtype != torch.float32:
            raise TypeError(
                f"ReorderedLinear runs fp32 on the CPU (engine/invariant/cpu/reordered.py); got {x.dtype} on {x.device}"
            )
        # on one torch thread with the cores as `products.linear` has them (re-entrant: free
        # inside the engine's forward), so that a call outside the engine gives the same bits
        with invariant_forward():
            out = onednn_product(x.reshape(-1, self.in_features), self.parts)
        if self.bias is not None:
            out = out + self.bias
        return out.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN layout"


def _applies(model: torch.nn.Module) -> bool:
    """Whether `reorder_linears` applies: oneDNN's matmul is in this torch build, and the model is
    fp32 on the CPU, not quantised: every floating-point parameter and buffer fp32 on the CPU,
    and no integer buffer of two or more dimensions (the packed weights of models/quant/)."""
    tensors = [*model.parameters(), *model.buffers()]
    return ONEDNN and all(
        t.device.type == "cpu"
        and (t.dtype == torch.float32 if t.is_floating_point() else t.dim() < 2)
        for t in tensors
    )


def reorder_linears(model: torch.nn.Module) -> int:
    """Replace, in place, every fp32 CPU `nn.Linear` of `model` whose weight is `reorderable` and
    shared with no embedding by a `ReorderedLinear` (module docstring); the dense weights are freed once nothing else holds
    them. Returns how many were replaced: 0 without oneDNN, or where the model is not fp32 on the
    CPU, or is quantised (`_applies`)."""
    if not _applies(model):
        return 0
    shared = {
        id(module.weight) for module in model.modules() if isinstance(module, torch.nn.Embedding)
    }
    targets = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if type(child) in (torch.nn.Linear, InvariantLinear)
        and id(child.weight) not in shared
        and reorderable(child.weight)
    ]
    for parent, name, child in targets:
        setattr(parent, name, ReorderedLinear(child))
    if targets:
        _own_copies(model)
    return len(targets)


def _own_copies(model: torch.nn.Module) -> None:
    """Copy the weights left (embeddings, norms, biases) out of whatever memory they share. A
    safetensors load maps the whole file and every tensor is a view of that mapping, which
    stays resident while any one of them lives, so the freed linears' pages stayed resident beside
    their reordered copies until the embedding and norms were copied."""
    copies: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for parameter in model.parameters():  # each once: a tied table is one Parameter
            parameter.data = parameter.data.clone()
        for module in model.modules():
            for name, buffer in module._buffers.items():
                if buffer is not None:
                    if id(buffer) not in copies:
                        copies[id(buffer)] = buffer.clone()
                    module._buffers[name] = copies[id(buffer)]
