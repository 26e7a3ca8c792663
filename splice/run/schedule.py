"""Which schedule computes a run: the stream wherever records cannot depend on the batch, else
one engine call per unit; decided at start and written to the manifest (`schedule`).

Both schedules give byte-identical records where a sequence's logits do not depend on what else
is in the batch: the stream then equals every unit computed alone, and so any resume, shard or
replay of one unit. The engine makes that so by construction on CPU in float32 (fixed-shape
products and attention, each call sequential and whole calls shared between the cores:
engine/invariant/cpu/products.py, engine/invariant/cpu/attention.py);
what is left to the library (a row's place in a fixed-shape GEMM tile) is measured on this
machine by the needle (engine/invariant/needle.py) before the stream is taken. Elsewhere (a
server, bf16, CUDA) each unit is one engine call, the whole batch that a resume or a replay
computes again.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nudgeability.engine.invariant.needle import InvarianceCheck, cached_check
from nudgeability.splice.run.prepare import Prepared

STREAM, UNITS = "stream", "units"
_CHECKS: dict[tuple[int, int], InvarianceCheck] = {}  # (id of the model, threads): its needle


@dataclass(frozen=True)
class Schedule:
    """The schedule a run takes, why, and the needle it rests on (None where none ran)."""

    name: str
    why: str
    invariance: InvarianceCheck | None = None

    def to_manifest(self) -> dict:
        out: dict = {"name": self.name, "why": self.why}
        if self.invariance is not None:
            out["invariance"] = self.invariance.to_manifest()
        return out


def choose_schedule(prepared: Prepared, asked: str | None = None) -> Schedule:
    """The run's schedule (module docstring); `asked` ("stream" / "units") overrides it."""
    if asked is not None:
        if asked not in (STREAM, UNITS):
            raise ValueError(f"schedule must be 'stream' or 'units', got {asked!r}")
        return Schedule(asked, "asked for")
    config = prepared.config
    if prepared.backend is not None:
        return Schedule(UNITS, "a server: its batching is its own")
    if config.device != "cpu":
        return Schedule(UNITS, f"{config.device}: no batch-invariant GPU path yet")
    if config.dtype != "float32":
        return Schedule(UNITS, f"{config.dtype}: the products are batch-invariant in float32 only")
    check = needle(prepared.loaded.model)
    if not check.holds:
        sizes = ", ".join(map(str, check.differing))
        return Schedule(
            UNITS, f"the needle's logits differed among {sizes} prompts on this machine", check
        )
    return Schedule(STREAM, "the needle held on this machine", check)


def needle(model: torch.nn.Module) -> InvarianceCheck:
    """The needle of `model` at torch's current thread count, run once per process, and once per
    machine, libraries and code (engine/invariant/needle.py, `cached_check`)."""
    key = (id(model), torch.get_num_threads())
    if key not in _CHECKS:
        _CHECKS[key] = cached_check(model)
    return _CHECKS[key]
