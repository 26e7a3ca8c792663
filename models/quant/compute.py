"""How a quantised linear computes: the compute modes, the fused path a layer took, and their summary.

Four modes, chosen at load (`load_quantized(..., compute=)`, `nudge run --quant-compute`):

- `exact`: dequantise the whole weight on every forward, bit for bit as the format's library does,
  then `F.linear` in the activations' dtype. Slow; the reference every other path is tested against.
- `fused` (the default): compute from the quantised storage with a kernel made for it, the
  weight never materialised in full precision. On CUDA each kernel's first run at a new shape
  is compared once with `exact` and dropped, recorded, if it disagrees (`self_check.py`). Which kernel depends on the format, the device and
  the layer's shape (`FusedPath.name`, e.g. `w4a16_simd(fp32)`); a layer no fused kernel takes
  keeps the exact path, and the loader names it in one warning. On CPU these are fp32 kernels
  whose results differ from `exact` only by the order of the float32 sums; the CUDA kernels
  compute in bf16. Each kernel's arithmetic is stated in `cpu_kernels.py`, `cuda_kernels.py` and
  `triton_kernels.py`.
- `fused-bf16`: on CPU, the libraries' bf16 kernels where there is one (torch's int4 kernel for
  W4A16, bitsandbytes' CPU kernel for NF4): faster at some shapes, but bf16 activations and
  outputs (a relative error of about 2^-8 per layer) change some greedy tokens. Elsewhere, and for
  FP8, the same kernels as `fused`.
- `dense`: dequantise once at load into the model's dtype and keep that weight: exact (the same
  values `exact` computes each time) and as fast as an unquantised model, at full-precision
  memory. The explicit choice of speed over memory.

`compute_paths(model)` counts the layers on each path per format; the run manifest records it, so
that a replay (`nudge verify`) can check it computes the same way.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

log = logging.getLogger(__name__)

QUANT_COMPUTES = ("exact", "fused", "fused-bf16", "dense")
FUSED_COMPUTES = ("fused", "fused-bf16")
DEFAULT_COMPUTE = "fused"
EXACT_PATH = "exact"
DENSE_PATH = "dense"


class QuantComputeError(ValueError):
    """A compute mode that does not exist; the message names the value and the valid ones."""


def check_compute(compute: str) -> str:
    """`compute` if it is one of `QUANT_COMPUTES`, else a `QuantComputeError`."""
    if compute not in QUANT_COMPUTES:
        raise QuantComputeError(
            f"quant compute {compute!r} is not one of {', '.join(QUANT_COMPUTES)}"
        )
    return compute


@dataclass(frozen=True)
class FusedPath:
    """One layer's non-exact compute: `run(x2d) -> y2d` (no bias), and the kernel's name.

    `run` takes the activations as a 2-D [rows, in] tensor of any float dtype and returns
    [rows, out] in that dtype. `tensors` are the path's own tensors (a repacked weight), kept here
    so that they live as long as the layer. A CUDA path also gives `choose(x2d)`, its kernels for
    that input in order of preference, and its layer `signature`: `configure` then runs it
    through the self-check (`self_check.py`) against the layer's exact path.
    """

    name: str
    run: Callable[[torch.Tensor], torch.Tensor]
    tensors: tuple[torch.Tensor, ...] = ()
    choose: Callable[[torch.Tensor], Sequence] | None = None
    signature: str = ""


class QuantLinearBase(nn.Module):
    """What the three quantised linears share: `dequantize()` (the exact weight), the compute
    path they were given, and a forward that takes it."""

    out_features: int
    in_features: int
    fused: FusedPath | None = None
    format_name: str = ""

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    @property
    def compute_path(self) -> str:
        return EXACT_PATH if self.fused is None else self.fused.name

    # the activations' dtype a fused path is chosen for (the model's; set by `configure`)
    compute_dtype: torch.dtype = torch.float32
    # How the layer runs a product (the exact and dense paths) and a fused kernel over its rows:
    # the library's own, until a caller that needs other calls gives the layer its own (the
    # engine's invariance, engine/invariant/linears.py `adopt`: fixed row tiles on CPU, the
    # Triton kernels at a fixed tile on the Triton branch).
    product: Callable[..., torch.Tensor] = staticmethod(torch.nn.functional.linear)
    rows: Callable[..., torch.Tensor] = staticmethod(lambda run, x: run(x))
    # Whether the exact path may call the format library's own matmul (bitsandbytes'), which
    # picks its kernel by the rows; False (the engine's Triton branch) sends it to `product`.
    library_matmul: bool = True

    def fused_path(self, read: Callable[[str], torch.Tensor], bf16: bool) -> FusedPath | str:
        """The fused kernel for this layer on its device (with `bf16`, the libraries' bf16 CPU
        kernel where there is one), or why there is none. `read(attr)` gives the tensor of buffer
        `attr` for a kernel that repacks it (the buffer itself, or a fresh copy)."""
        raise NotImplementedError  # pragma: no cover

    def configure(
        self,
        compute: str,
        dtype: torch.dtype,
        read: Callable[[str], torch.Tensor] | None = None,
    ) -> str | None:
        """Take compute mode `compute` (see the module docstring); returns why a layer asked to
        be fused keeps the exact path, else None. `dtype` is the model's (for `dense`)."""
        self.fused = None
        self.compute_dtype = dtype
        if check_compute(compute) == "dense":
            weight = self.dequantize(dtype).contiguous()
            self.fused = FusedPath(
                DENSE_PATH, lambda x: self.product(x, weight.to(x.dtype)), (weight,)
            )
        elif compute in FUSED_COMPUTES:
            found = self.fused_path(
                read or (lambda attr: getattr(self, attr)), bf16=compute == "fused-bf16"
            )
            if isinstance(found, str):
                return found
            self.fused = self_checked(found, self) if found.choose is not None else found
        return None

    def exact_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.product(x, self.dequantize(x.dtype), self.bias)

    def exact_no_bias(self, x: torch.Tensor) -> torch.Tensor:
        """The exact path without the bias: what a fused path hands a prefill over to."""
        return self.product(x, self.dequantize(x.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused is None:
            return self.exact_forward(x)
        flat = x.reshape(-1, x.shape[-1])
        # a fused kernel runs over the rows as `rows` says (fixed tiles in the engine's CPU
        # forward); the dense path is a product, which `product` already runs so
        dense = self.fused.name == DENSE_PATH
        y = self.fused.run(flat) if dense else self.rows(self.fused.run, flat)
        y = y.view(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias


def compute_paths(model: nn.Module) -> dict[str, dict[str, int]]:
    """{format: {path: number of layers}} over the quantised linears of `model` ({} if none)."""
    counts: dict[str, Counter] = {}
    for module in model.modules():
        if isinstance(module, QuantLinearBase):
            counts.setdefault(module.format_name, Counter())[module.compute_path] += 1
    return {fmt: dict(sorted(c.items())) for fmt, c in sorted(counts.items())}


def self_checked(path: FusedPath, layer: QuantLinearBase) -> FusedPath:
    """`path` with its kernels checked once per key against `layer`'s exact path (self_check.py)."""
    from nudgeability.models.quant.self_check import SelfCheckedRun

    run = SelfCheckedRun(
        path.choose,
        lambda: layer.dequantize(torch.float32),
        layer.exact_no_bias,
        path.signature,
    )
    return FusedPath(path.name, run, path.tensors, path.choose, path.signature)


def kernels_run(model: nn.Module) -> dict[str, dict[str, int]]:
    """{format: {kernel: number of layers}} over the kernels the self-checked (CUDA) paths have
    actually run so far, with their tiles, and `exact` where a check fell back to it; {} before
    any forward or on CPU. `compute_paths` says what each layer was given at load."""
    counts: dict[str, Counter] = {}
    for module in model.modules():
        ran = getattr(getattr(module, "fused", None), "run", None)
        if isinstance(module, QuantLinearBase) and hasattr(ran, "ran"):
            for kernel in ran.ran:
                counts.setdefault(module.format_name, Counter())[kernel] += 1
    return {fmt: dict(sorted(c.items())) for fmt, c in sorted(counts.items())}


def warn_fallbacks(directory, fallbacks: dict[str, str]) -> None:
    """One warning naming every layer (and why) that kept the exact path under `fused`."""
    if not fallbacks:
        return
    shown = "; ".join(f"{name} ({why})" for name, why in list(fallbacks.items())[:8])
    more = f"; and {len(fallbacks) - 8} more" if len(fallbacks) > 8 else ""
    log.warning(
        "%s: %d quantised layer(s) have no fused kernel and dequantise on every forward: %s%s",
        directory,
        len(fallbacks),
        shown,
        more,
    )
