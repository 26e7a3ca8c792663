"""Which schedule computes a run: the stream wherever records cannot depend on the batch, else
one engine call per unit; decided at start and written to the manifest (`schedule`).

Both schedules give byte-identical records where a sequence's logits do not depend on what else
is in the batch: the stream then equals every unit computed alone, and so any resume, shard or
replay of one unit. The engine makes that so by construction on CPU in float32 (fixed-shape
products and attention, each call sequential and whole calls shared between the cores:
engine/invariant/cpu/products.py, engine/invariant/cpu/attention.py), and on CUDA with its
batch-invariant kernels (engine/invariant/cuda/, in the model's bf16: the CPU's float32 gate does
not apply there); what is left to the libraries is measured on this machine by a needle before
the stream is taken: on CPU engine/invariant/needle.py, on CUDA engine/invariant/cuda_needle.py
on the run's own engine options. Elsewhere each unit is one engine call, the whole batch that a
resume or a replay computes again, and the manifest says why: a server; a model the invariant
CUDA kernels do not cover (sliding-window layers or heads over 256 wide, as Gemma 4's; a
bitsandbytes checkpoint, whose kernels choose by rows and card); a needle that failed.

On CUDA the choice is made once, before the run's engine is built (shape.py `settle`, through
runner.py `RunEngine`), since the engine computes with the invariant kernels exactly when the
run takes the stream (engine_build.py `run_engine`, `invariant`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from nudgeability.engine.invariant.cuda_needle import cached_cuda_check
from nudgeability.engine.invariant.needle import InvarianceCheck, cached_check
from nudgeability.models.quant.bnb4_linear import BnB4Linear
from nudgeability.splice.run import engine_build
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.device_batching import batches_from_pool
from nudgeability.splice.run.prepare import Prepared

STREAM, UNITS = "stream", "units"
CUDA_DTYPE = "bfloat16"  # the invariant CUDA kernels' dtype
WIDEST_HEAD = 256  # the invariant CUDA attention's widest head
# (id of the model, threads or "cuda"): its needle, once per process
_CHECKS: dict[tuple[int, int | str], InvarianceCheck] = {}


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
    """The schedule of a prepared run (module docstring); `asked` ("stream" / "units")
    overrides it."""
    loaded = prepared.loaded
    return decide(
        prepared.config,
        None if loaded is None else loaded.model,
        None if loaded is None else loaded.tokenizer,
        server=prepared.backend is not None,
        asked=asked,
    )


def decide(
    config: RunConfig,
    model: torch.nn.Module | None,
    tokenizer=None,
    *,
    server: bool = False,
    asked: str | None = None,
    check: Callable[[], InvarianceCheck] | None = None,
) -> Schedule:
    """The schedule of a run of `config` on the loaded `model` (module docstring); `config`'s
    dtype and device as resolved (validation.py `device_defaults`). `check`: the needle's
    answer on this machine (default: the device's own needle, once per process)."""
    if asked is not None:
        if asked not in (STREAM, UNITS):
            raise ValueError(f"schedule must be 'stream' or 'units', got {asked!r}")
        return Schedule(asked, "asked for")
    if server:
        return Schedule(UNITS, "a server: its batching is its own")
    if batches_from_pool(config.device):
        return _on_cuda(config, model, check or (lambda: cuda_needle(model, tokenizer, config)))
    if config.device != "cpu":
        return Schedule(UNITS, f"{config.device}: no batch-invariant path there")
    if config.dtype != "float32":
        return Schedule(UNITS, f"{config.dtype}: the products are batch-invariant in float32 only")
    return _measured(check or (lambda: needle(model)), "this machine")


def _on_cuda(config: RunConfig, model, check: Callable[[], InvarianceCheck]) -> Schedule:
    if not engine_build.cuda_invariance_available():
        return Schedule(
            UNITS, f"{config.device}: no batch-invariant CUDA kernels here (Triton does not import)"
        )
    if config.dtype != CUDA_DTYPE:
        return Schedule(
            UNITS, f"{config.dtype}: the batch-invariant CUDA kernels compute in {CUDA_DTYPE}"
        )
    uncovered = uncovered_on_cuda(model)
    if uncovered is not None:
        return Schedule(UNITS, uncovered)
    return _measured(check, "this GPU")


def _measured(check: Callable[[], InvarianceCheck], where: str) -> Schedule:
    answer = check()
    if not answer.holds:
        sizes = ", ".join(map(str, answer.differing))
        why = f"the needle's logits differed among {sizes} prompts on {where}"
        return Schedule(UNITS, why, answer)
    return Schedule(STREAM, f"the needle held on {where}", answer)


def uncovered_on_cuda(model: torch.nn.Module) -> str | None:
    """Why the batch-invariant CUDA kernels do not cover `model`, or None where they do: layers
    with a sliding window, heads wider than `WIDEST_HEAD` (Gemma 4 has both), linears of a
    bitsandbytes checkpoint."""
    config = model.config
    fields = config.to_dict()  # per-layer attributes read as the config stores them
    name = fields.get("model_type") or type(model).__name__
    why = []
    if "sliding_attention" in (fields.get("layer_types") or ()):
        why.append("sliding-window layers")
    heads = [fields.get(key) for key in ("head_dim", "global_head_dim")]
    widest = max((h for h in heads if isinstance(h, int)), default=0)
    if widest > WIDEST_HEAD:
        why.append(f"head size {widest}")
    if why:
        return f"{name}: {' and '.join(why)}: no batch-invariant CUDA attention for them"
    quant = fields.get("quantization_config") or {}
    method = quant.get("quant_method") if isinstance(quant, dict) else quant.quant_method
    if method == "bitsandbytes" or any(isinstance(m, BnB4Linear) for m in model.modules()):
        return f"{name}: a bitsandbytes checkpoint: its kernels choose by rows and card"
    return None


def needle(model: torch.nn.Module) -> InvarianceCheck:
    """The needle of `model` at torch's current thread count, run once per process, and once per
    machine, libraries and code (engine/invariant/needle.py, `cached_check`)."""
    key = (id(model), torch.get_num_threads())
    if key not in _CHECKS:
        _CHECKS[key] = cached_check(model)
    return _CHECKS[key]


def cuda_needle(model: torch.nn.Module, tokenizer, config: RunConfig) -> InvarianceCheck:
    """The CUDA needle of `model` on the run's engine options (engine_build.py `needle_engine`),
    run once per process, and once per card, libraries and code (engine/invariant/cuda_needle.py,
    `cached_cuda_check`)."""
    key = (id(model), "cuda")
    if key not in _CHECKS:
        _CHECKS[key] = cached_cuda_check(
            model,
            lambda: engine_build.needle_engine(model, tokenizer, config),
            engine_build.needle_options(config),
        )
    return _CHECKS[key]
