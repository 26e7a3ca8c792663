"""The first run of a fused CUDA kernel at a new shape is compared once with the exact path.

A CUDA path (`cuda_kernels.py`) offers, for each input, its kernels in order of preference
(`FusedPath.choose`: `_scaled_mm`, tinygemm, bitsandbytes, a Triton kernel at its tile). The
first time a kernel runs for a key (the layer's signature: format, [N, K], blocks or group; the
kernel and its tile; the activations' dtype; the rows rounded up to a power of two; the device),
its output is compared with y = x @ W.T computed in float64 from the exact path's weight (the
layer's own dequantisation) on the same input. Within the bound below it is trusted for that key
from then on, in every layer of the same signature; beyond it, or if it raises, the key falls
back for good to the next kernel (checked in turn) and finally to the exact path, and the
fallback is recorded (`util.fallbacks.record`: one warning, listed for the manifest) with the
size of the difference. A check costs one float64 matmul per key, not per call.

The bound, per output: |y - ref| <= e * S + u * |ref| (+ a floor term), S = |x| @ A.T, with u the
unit roundoff of y's dtype (2^-8 bf16, 2^-11 fp16, 2^-24 fp32), e = the kernel's input error
(`Kernel.input_unit`: 0 for weight-only kernels, 2^-4 for e4m3 activations) + u (the decoded
weight rounded to the activations' dtype) + gamma(K + 2) (fp32 sums), A the magnitudes of the
terms the kernel forms (|W| unless `Kernel.magnitude` says more: tinygemm's bf16 zero term), and
the floor `Kernel.input_floor` * max_k |x| * sum_k |W| for e4m3's subnormal spacing. A wrong
layout or scale (a transposed block scale) is off by the scale ratio, far outside it.

Inside a CUDA-graph capture or a torch.compile trace nothing can be compared, and inside
`deferred()` nothing is (a kernel that raises there is still refused): the engine's capture
warm-up runs pad tokens at position 0, every row the same, which would give each row class its
verdict from rows that cannot show a wrong kernel.
An unchecked key runs its first kernel there unchecked and is checked at its next eager call on
real rows: the engine runs each bucket's first real step once uncaptured before it replays the
bucket's graph, and captures the bucket again where that step refused a kernel (`refusals`,
engine/attention/static_dispatch.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from nudgeability.util import fallbacks

UNITS = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}
U32 = 2.0**-24


@dataclass(frozen=True)
class Kernel:
    """One kernel a fused path can run for an input: its name (what ran, with its tile), the call
    x2d -> y2d (no bias), and what the self-check's bound needs to know about it."""

    name: str
    run: Callable[[torch.Tensor], torch.Tensor]
    input_unit: float = 0.0  # relative error of the activations it feeds in (e4m3: 2^-4)
    input_floor: float = 0.0  # absolute activation error per max |x| of the row (subnormals)
    magnitude: Callable[[], torch.Tensor] | None = None  # A [N, K] (default |W|)


_lock = threading.Lock()
_verdicts: dict[tuple, bool] = {}
_deferring = 0  # open `deferred` contexts


@contextmanager
def deferred() -> Iterator[None]:
    """No verdict is given for the duration (module docstring); re-entrant."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1


def refusals() -> int:
    """How many keys were refused so far: a step that raised it ran a kernel it now drops."""
    with _lock:
        return sum(not verdict for verdict in _verdicts.values())


def reset() -> None:
    """Forget every verdict (a test; a new device)."""
    with _lock:
        _verdicts.clear()


def rows_class(rows: int) -> int:
    """The rows rounded up to a power of two: the self-check's row buckets."""
    return 1 << max(rows - 1, 0).bit_length()


def gamma(n: int) -> float:
    return n * U32 / (1 - n * U32)


def _untraceable() -> bool:
    if torch.compiler.is_compiling():
        return True
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


class SelfCheckedRun:
    """`run(x)` for a fused path: its preferred trusted kernel for x, each checked once per key.

    `choose(x)` lists the kernels for x (preferred first); `weight()` is the exact path's weight
    [N, K] (float32), `exact(x)` the exact path (the last resort, never checked: it is the
    reference). `signature` names the layer kind the verdicts are shared by. `ran` maps each
    kernel that ran to the row buckets it ran for: what this layer actually computed with."""

    def __init__(
        self,
        choose: Callable[[torch.Tensor], Sequence[Kernel]],
        weight: Callable[[], torch.Tensor],
        exact: Callable[[torch.Tensor], torch.Tensor],
        signature: str,
    ):
        self.choose, self.weight, self.exact, self.signature = choose, weight, exact, signature
        self.ran: dict[str, set[int]] = {}

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        kernels = list(self.choose(x))
        bucket = rows_class(x.shape[0])
        for i, kernel in enumerate(kernels):
            key = (self.signature, kernel.name, x.dtype, bucket, str(x.device))
            verdict = _verdicts.get(key)
            if verdict is False:
                continue
            if verdict is None and not _untraceable() and x.shape[0] > 0:
                # deferred: a kernel that raises is refused now, its numbers wait for real rows
                why, y = self._check(kernel, x, compare=not _deferring)
                if why is None and _deferring:
                    self.ran.setdefault(kernel.name, set()).add(bucket)
                    return y
                with _lock:
                    _verdicts[key] = why is None
                if why is not None:
                    used = kernels[i + 1].name if i + 1 < len(kernels) else "exact"
                    where = f"{kernel.name} {self.signature} ({str(x.dtype)[6:]}, {bucket} rows)"
                    fallbacks.record(where, used, why)
                    continue
            else:
                y = kernel.run(x)
            self.ran.setdefault(kernel.name, set()).add(bucket)
            return y
        self.ran.setdefault("exact", set()).add(bucket)
        return self.exact(x)

    def _check(
        self, kernel: Kernel, x: torch.Tensor, compare: bool = True
    ) -> tuple[str | None, torch.Tensor | None]:
        try:
            y = kernel.run(x)
        except Exception as error:  # recorded with its message, never swallowed silently
            return f"raised {type(error).__name__}: {error}", None
        return (disagreement(kernel, x, y, self.weight()) if compare else None), y


def disagreement(kernel: Kernel, x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor):
    """None if y is within the bound (module docstring) of x @ weight.T, else how far it is."""
    if y.shape != (x.shape[0], weight.shape[0]) or y.dtype != x.dtype:
        return f"gave {list(y.shape)} {y.dtype} for {list(x.shape)} {x.dtype}"
    if not bool(torch.isfinite(y).all()):
        return "non-finite outputs"
    w = weight.to(torch.float64)
    xd = x.to(torch.float64)
    ref = xd @ w.T
    a = w.abs() if kernel.magnitude is None else kernel.magnitude().to(torch.float64)
    s = xd.abs() @ a.T
    u = UNITS.get(y.dtype, 2.0**-8)
    bound = (kernel.input_unit + u + gamma(x.shape[1] + 2)) * s + u * ref.abs()
    if kernel.input_floor:
        bound = bound + kernel.input_floor * xd.abs().amax(1, keepdim=True) * w.abs().sum(1)
    err = (y.to(torch.float64) - ref).abs()
    over = err - bound
    if not bool((over > 0).any()):
        return None
    at = int(over.argmax())
    row, col = divmod(at, err.shape[1])
    return (
        f"max |fused - exact| {err.max().item():.3g} (bound there {bound.flatten()[at].item():.3g}, "
        f"at row {row}, output {col}); {int((over > 0).sum())} of {err.numel()} outputs over"
    )
