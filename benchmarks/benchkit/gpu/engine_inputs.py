"""The inputs the engine section's parts share (`engine.py`, `engine_speed.py`): random token
ids, greedy sampling params that ignore EOS, an engine on the model, and a device sync for timing."""

from __future__ import annotations

import torch

Row = tuple[str, str]  # (check, result), check.py's table row


def random_ids(n: int, seed: int, vocab: int) -> list[int]:
    """`n` random token ids in [3, vocab - 1), the same for the same seed."""
    return torch.randint(3, vocab - 1, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def greedy_params(n: int):
    """Greedy `SamplingParams` for exactly `n` new tokens (EOS ignored)."""
    from nudgeability.engine import SamplingParams

    return SamplingParams(max_new_tokens=n, ignore_eos=True)


def make_engine(model, **kwargs):
    """An `Engine` on `model` with the part's options."""
    from nudgeability.engine import Engine

    return Engine(model, **kwargs)


def sync(device) -> None:
    """Wait for the device's queued work (CUDA), so that a timer reads what the work took."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
