"""How a model's forward enters the batch invariance: its linears replaced, and a context.

`adopt(model)` replaces, in place, what computes a product in `model`: every plain `nn.Linear`
becomes an `InvariantLinear` (its class swapped, as gpt-fast swaps a model's linears for its
quantised ones: the same Parameters, so a tied LM head stays tied), and every quantised linear
of models/quant/ is given the invariant product for its exact path and, for its fused kernel,
a `QuantRows`. What they compute changes only inside `invariant_forward()`, the context the
engine's model runner enters around each forward and LM-head call where the run is invariant
(engine/model_runner.py). There a product is routed by its tensors' device: a CPU tensor runs in
fixed 16-row tiles (cpu/products.py) on one torch thread, the process's threads becoming the
cores that share whole calls (cpu/cores.py); a CUDA tensor runs one Triton kernel at a tile fixed
by the weight's shape (cuda/products.py), as does a CPU tensor inside `invariant_forward(
triton=True)` (the CUDA branch forced onto CPU tensors, under Triton's interpreter: how the
tests check it, `Engine(invariance="triton")`). Outside it (HF `generate` on the same model, a
forward of the caller's own) every module computes exactly as before it was adopted. Nothing of
torch is reassigned: a linear that is not a module of the model (a functional call inside a
model's code) is not reached, which the needle (needle.py) would show on the model it runs on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from nudgeability.engine.invariant.cpu import products as cpu_products
from nudgeability.engine.invariant.cpu.cores import CORES
from nudgeability.engine.invariant.cuda import products as cuda_products
from nudgeability.models.quant.compute import QuantLinearBase

_depth = 0  # how many `invariant_forward` contexts are open (re-entrant)
_triton = False  # the outermost context forces the CUDA branch onto CPU tensors


def active() -> bool:
    """Whether a forward now runs in the invariant products (inside `invariant_forward`)."""
    return _depth > 0


def _on_triton(x: torch.Tensor) -> bool:
    return x.device.type == "cuda" or _triton


def product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """`F.linear`, inside `invariant_forward` as the invariant product for x's device (module
    docstring: cpu/products.py `linear` or cuda/products.py `linear`)."""
    if not _depth:
        return F.linear(x, weight, bias)
    if _on_triton(x):
        return cuda_products.linear(x, weight, bias)
    return cpu_products.linear(x, weight, bias)


def rows(run, x: torch.Tensor) -> torch.Tensor:
    """`run(x)` for a kernel with its own blocking by rows: called on exact 16-row tiles inside
    `invariant_forward`, so that it sees one shape whatever the rows (cpu/products.py)."""
    return cpu_products.in_row_tiles(run, x) if _depth and x.device.type == "cpu" else run(x)


class QuantRows:
    """A quantised layer's `rows` (models/quant/compute.py): its fused kernel `run` outside the
    invariant context; inside it, on the Triton branch, the layer's Triton kernel at the
    invariant plan in its place (cuda/products.py `quantised`), else `rows`."""

    def __init__(self, layer: QuantLinearBase):
        self.layer = layer

    def __call__(self, run, x: torch.Tensor) -> torch.Tensor:
        if _depth and _on_triton(x):
            return cuda_products.quantised(self.layer, x)
        return rows(run, x)


class InvariantLinear(torch.nn.Linear):
    """`nn.Linear` whose product is `product`: the library's own outside the invariant context."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return product(x, self.weight, self.bias)


def adopt(model: torch.nn.Module, triton: bool = False) -> int:
    """Replace the products of `model` in place (module docstring); returns how many modules
    changed (0 the second time). With `triton` (a run on the Triton branch), each quantised
    linear's Triton kernel is prepared now (cuda/products.py `prepare`), and its exact path
    takes `product` even where it would call its library's matmul (`library_matmul`)."""
    changed = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.__class__ = InvariantLinear
            changed += 1
        elif isinstance(module, QuantLinearBase):
            if module.product is not product:
                module.product, module.rows = product, QuantRows(module)
                changed += 1
            if triton:
                module.library_matmul = False  # bitsandbytes' exact matmul follows the rows
                cuda_products.prepare(module)
    return changed


@contextmanager
def invariant_forward(triton: bool = False) -> Iterator[None]:
    """The adopted modules' invariant products for the duration; with `triton`, CPU tensors too
    take the CUDA branch (module docstring). Re-entrant: an inner context keeps the outer's branch.

    On CPU torch itself runs on one thread, because a library GEMM run on several threads splits
    its work by the shape and the thread count, so a row's bits would follow them. The threads
    torch was given become `CORES` instead: whole tiles and slices, each one sequential kernel,
    shared between threads (cpu/cores.py), so the records depend on the thread count no more than
    on the batch. The Triton branch leaves the threads alone (no CPU product of it runs on them).
    Not thread-safe: one forward at a time per process, as the engine runs them."""
    global _depth, _triton
    if _depth:
        _depth += 1
        try:
            yield
        finally:
            _depth -= 1
        return
    if triton:
        _depth, _triton = 1, True
        try:
            yield
        finally:
            _depth, _triton = 0, False
        return
    threads = torch.get_num_threads()
    CORES.resize(threads)
    if threads != 1:
        torch.set_num_threads(1)
    _depth = 1
    try:
        yield
    finally:
        _depth = 0
        CORES.resize(1)
        if threads != 1:
            torch.set_num_threads(threads)
