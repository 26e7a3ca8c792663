"""How a model's forward enters the CPU invariance: its linears replaced, and a context.

`adopt(model)` replaces, in place, what computes a product in `model`: every plain `nn.Linear`
becomes an `InvariantLinear` (its class swapped, as gpt-fast swaps a model's linears for its
quantised ones: the same Parameters, so a tied LM head stays tied), and every quantised linear
of models/quant/ is given the invariant product for its exact path and the fixed row tiles for
its fused kernel. What they compute changes only inside `invariant_forward()`, the context the
engine's model runner enters around each CPU forward and LM-head call: there the products run
in fixed 16-row tiles (cpu/products.py) on one torch thread, the process's threads becoming the
cores that share whole calls (cpu/cores.py). Outside it (HF `generate` on the same model, a
forward of the caller's own) every module computes exactly as before it was adopted. Nothing of
torch is reassigned: a linear that is not a module of the model (a functional call inside a
model's code) is not reached, which the needle (needle.py) would show on the model it runs on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from nudgeability.engine.invariant.cpu.cores import CORES
from nudgeability.engine.invariant.cpu.products import in_row_tiles, linear
from nudgeability.models.quant.compute import QuantLinearBase

_depth = 0  # how many `invariant_forward` contexts are open (re-entrant)


def active() -> bool:
    """Whether a forward now runs in the invariant products (inside `invariant_forward`)."""
    return _depth > 0


def product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """`F.linear`, in fixed row tiles inside `invariant_forward` (cpu/products.py `linear`)."""
    return linear(x, weight, bias) if _depth else F.linear(x, weight, bias)


def rows(run, x: torch.Tensor) -> torch.Tensor:
    """`run(x)` for a kernel with its own blocking by rows: called on exact 16-row tiles inside
    `invariant_forward`, so that it sees one shape whatever the rows (cpu/products.py)."""
    return in_row_tiles(run, x) if _depth and x.device.type == "cpu" else run(x)


class InvariantLinear(torch.nn.Linear):
    """`nn.Linear` whose product is `product`: the library's own outside the invariant context."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return product(x, self.weight, self.bias)


def adopt(model: torch.nn.Module) -> int:
    """Replace the products of `model` in place (module docstring); returns how many modules
    changed (0 the second time)."""
    changed = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.__class__ = InvariantLinear
            changed += 1
        elif isinstance(module, QuantLinearBase) and module.product is not product:
            module.product, module.rows = product, rows
            changed += 1
    return changed


@contextmanager
def invariant_forward() -> Iterator[None]:
    """The adopted modules' products in fixed row tiles, on one torch thread, for the duration.

    Torch itself runs on one thread, because a library GEMM run on several threads splits its
    work by the shape and the thread count, so a row's bits would follow them. The threads torch
    was given become `CORES` instead: whole tiles and slices, each one sequential kernel, shared
    between threads (cpu/cores.py), so the records depend on the thread count no more than on
    the batch. Not thread-safe: one forward at a time per process, as the engine runs them.
    Re-entrant."""
    global _depth
    if _depth:
        _depth += 1
        try:
            yield
        finally:
            _depth -= 1
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
