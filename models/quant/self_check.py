"""Each fused CUDA kernel is compared once with the exact path, before the run uses it.

A CUDA path (`cuda_kernels.py`) offers, for each input, its kernels in order of preference
(`FusedPath.choose`: `_scaled_mm`, tinygemm, bitsandbytes, a Triton kernel at its tile). Each
kernel gets one verdict per key (the layer's signature: format, [N, K], blocks or group; the
kernel and its tile; the activations' dtype; the device): its output is compared with
y = x @ W.T computed in float64 from the exact path's weight (the layer's own dequantisation) on
the same input. Within the bound below it is trusted for that key, in every layer of the same
signature, at every row count; beyond it, or if it raises, the key falls back for good to the
next kernel (checked in turn) and finally to the exact path, and the fallback is recorded
(`util.fallbacks.record`: one warning, listed for the manifest) with the size of the difference.

The verdicts are made before the run (`probing`, engine/kernel_checks.py): on the first call of
each layer signature inside it, on real activations of a probe forward, every kernel that
`choose` offers at any of the row counts the engine can run (`probing`'s `rows`) is checked, at
the largest of those counts (up to `CHECK_ROWS`) that chooses it. So which kernel computes a
layer depends on the row count through `choose` alone, never on which rows a kernel met first.
A key met later with no verdict (a row count the probe did not list) is checked at that call.

The bound, per output: |y - ref| <= e * S + u * |ref| (+ a floor term), S = |x| @ A.T, with u the
unit roundoff of y's dtype (2^-8 bf16, 2^-11 fp16, 2^-24 fp32), e = the kernel's input error
(`Kernel.input_unit`: 0 for weight-only kernels, 2^-4 for e4m3 activations) + u (the decoded
weight rounded to the activations' dtype) + gamma(K + 2) (fp32 sums), A the magnitudes of the
terms the kernel forms (|W| unless `Kernel.magnitude` says more: tinygemm's bf16 zero term), and
the floor `Kernel.input_floor` * max_k |x| * sum_k |W| for e4m3's subnormal spacing. A wrong
layout or scale (a transposed block scale) is off by the scale ratio, far outside it.

Inside a CUDA-graph capture or a torch.compile trace nothing can be compared, and inside
`deferred()` nothing is (a kernel that raises there is still refused): the engine's capture
warm-up runs pad tokens at position 0, every row the same, which cannot show a wrong kernel. An
unchecked key runs its first kernel there unchecked and is checked at its next eager call.
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
_probe_rows: tuple[int, ...] = ()  # inside `probing`: the row counts whose kernels get verdicts
CHECK_ROWS = 256  # the most rows a kernel is checked at (module docstring)


@contextmanager
def deferred() -> Iterator[None]:
    """No verdict is given for the duration (module docstring); re-entrant."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1


@contextmanager
def probing(rows: Sequence[int]) -> Iterator[None]:
    """Every unchecked kernel a layer's `choose` offers at any of `rows` row counts gets its
    verdict at the layer's first call for the duration (module docstring)."""
    global _probe_rows
    before, _probe_rows = _probe_rows, tuple(sorted(set(rows)))
    try:
        yield
    finally:
        _probe_rows = before


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
        self.probed = False  # its kernels got their verdicts inside `probing`

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if _probe_rows and not self.probed and not _deferring and not _untraceable():
            self._probe(x)
        kernels = list(self.choose(x))
        bucket = rows_class(x.shape[0])
        for i, kernel in enumerate(kernels):
            key = self._key(kernel, x)
            verdict = _verdicts.get(key)
            if verdict is False:
                continue
            if verdict is None and not _untraceable() and x.shape[0] > 0:
                # deferred: a kernel that raises is refused now, its numbers wait for real rows
                why, y = self._check(kernel, x, compare=not _deferring)
                if why is None and _deferring:
                    self.ran.setdefault(kernel.name, set()).add(bucket)
                    return y
                if not self._judge(key, why, kernels[i + 1 :], x):
                    continue
            else:
                y = kernel.run(x)
            self.ran.setdefault(kernel.name, set()).add(bucket)
            return y
        self.ran.setdefault("exact", set()).add(bucket)
        return self.exact(x)

    def _key(self, kernel: Kernel, x: torch.Tensor) -> tuple:
        """One verdict per kernel (its tile in its name), layer signature, dtype and device."""
        return (self.signature, kernel.name, x.dtype, str(x.device))

    def _probe(self, x: torch.Tensor) -> None:
        """Verdicts for every unchecked kernel `choose` offers at the probed row counts, each
        checked once on `x`'s rows (repeated where more are needed) at the largest count up to
        `CHECK_ROWS` that offers it, else at the smallest."""
        self.probed = x.shape[0] > 0
        if not self.probed:
            return
        counts: dict[tuple, tuple[int, Kernel, list[Kernel]]] = {}
        for rows in _probe_rows:
            kernels = list(self.choose(x.new_empty(rows, x.shape[1])))
            for i, kernel in enumerate(kernels):
                key = self._key(kernel, x)
                if key in _verdicts:
                    continue
                held = counts.get(key)
                if held is None or rows <= CHECK_ROWS:
                    counts[key] = (rows, kernel, kernels[i + 1 :])
        for key, (rows, kernel, rest) in counts.items():
            if key in _verdicts:  # judged with an earlier kernel of the same name
                continue
            xr = x.repeat(-(-rows // x.shape[0]), 1)[:rows]
            kernel = next(k for k in self.choose(xr) if self._key(k, xr) == key)
            why, _ = self._check(kernel, xr)
            self._judge(key, why, rest, xr)

    def _judge(self, key: tuple, why: str | None, rest: Sequence[Kernel], x: torch.Tensor):
        """Keep `key`'s verdict (True: trusted); a refusal is recorded with what runs instead."""
        with _lock:
            _verdicts[key] = why is None
        if why is not None:
            used = rest[0].name if rest else "exact"
            where = f"{key[1]} {self.signature} ({str(x.dtype)[6:]})"
            fallbacks.record(where, used, f"{why}, at {x.shape[0]} rows")
        return why is None

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
