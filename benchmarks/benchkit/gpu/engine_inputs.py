"""The inputs the GPU check's parts share (`engine.py`, `engine_speed.py`, `plan.py`, `trunk.py`):
random token ids, greedy sampling params that ignore EOS, the run's engine on the model, and a
device sync for timing.

Every engine the check builds is `nudge run`'s (splice/run/engine_build.py `run_engine`) for the
config `nudge run --device cuda` resolves (`run_config`): block 16, a pool sized from free memory
and the row cap from it, the fixed-shape decode with its buckets captured at start, graphs and
fused layers, as the run has them. A part that measures something the run's engine does not do
(its eager twin, a row cap every timed row fits under) passes those options as `derived` with
the reason, and the table lists them (check.py). On the dry run the same options build the engine
on CPU, which takes them as the CPU does: no graphs and no fused kernels, a pool that grows.
"""

from __future__ import annotations

import gc

import torch

# the paper's budgets (estimate/paper_campaign.toml): the row cap follows from them on CUDA
PAPER_BUDGETS = (4096, 2048)
# (options, why) of every derived engine so far, in order (check.py lists them in the table)
DERIVED: list[tuple[str, str]] = []

Row = tuple[str, str]  # (check, result), check.py's table row


def random_ids(n: int, seed: int, vocab: int) -> list[int]:
    """`n` random token ids in [3, vocab - 1), the same for the same seed."""
    return torch.randint(3, vocab - 1, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def greedy_params(n: int):
    """Greedy `SamplingParams` for exactly `n` new tokens (EOS ignored)."""
    from nudgeability.engine import SamplingParams

    return SamplingParams(max_new_tokens=n, ignore_eos=True)


def run_config(**fields):
    """The `RunConfig` `nudge run --device cuda` resolves for the check's model: bf16, the
    fixed-shape decode as validation.py `device_defaults` turns it on for CUDA, the paper's
    budgets, no KV budget or memory share (the pool from free memory)."""
    from dataclasses import replace

    from nudgeability.splice.run.config import RunConfig
    from nudgeability.splice.run.validation import device_defaults

    budgets = dict(max_new_tokens=PAPER_BUDGETS[0], max_new_tokens_arm=PAPER_BUDGETS[1])
    requested = RunConfig(model="random-init-qwen3", device="cuda", dtype="bfloat16")
    requested = replace(requested, **{**budgets, **fields})
    resolved = device_defaults(requested, "cuda")
    return replace(requested, dtype=resolved.dtype, static_decode=resolved.static_decode)


def make_engine(model, why: str = "", **derived):
    """`nudge run`'s engine on `model` (splice/run/engine_build.py `run_engine`, `run_config`);
    `derived`: options other than the run's that the part measures with, `why` says what for."""
    from nudgeability.splice.run.engine_build import run_engine

    if derived and not why:
        raise ValueError(f"engine options {sorted(derived)} other than the run's need a reason")
    if derived:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(derived.items()))
        if (shown, why) not in DERIVED:
            DERIVED.append((shown, why))
    free_memory(model.device)  # a pool sized from free memory must not count a dead engine's
    return run_engine(model, None, run_config(), **derived)


def free_memory(device) -> None:
    """Collect dead engines (their pools, graphs) and give their memory back to the device."""
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def sync(device) -> None:
    """Wait for the device's queued work (CUDA), so that a timer reads what the work took."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
