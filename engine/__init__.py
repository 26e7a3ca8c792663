"""nudgeability.engine: prefill a prefix once, fork it into many arms, decode them as one batch.

Where each concept lives:

- `engine.py`: `Engine` (generate / fork / fork_many) and the loop; `sequence.py`: requests,
  per-arm state, results, `FINISH_REASONS`; `sampling_params.py`, `sampler.py`: decoding.
- `scheduler.py`: `GroupShape.of` (the shape a group runs with; an empty suffix borrows the
  prefix's last token), `BatchSlots` (what a batch allocates = its cost under a budget),
  `plan_batches`.
- `batch.py`: one batch's token inputs, sampling inputs and stop checks.
- `attention_layout.py`: what one forward call computes: `PrefixStep`, `ArmStep`, the `Fold` of
  arms into query rows, query slots and attention biases.
- `fork_cache.py`: `ForkCache` storage; `PrefixKV` / `ArmKV`, the handles its `update` returns.
- `shared_prefix_attention.py`: the cascade attention over those handles.
- `model_runner.py`: the HF model behind it; `errors.py`: `EngineInputError`,
  `UnsupportedModelError`; `profile.py`: aten-op and host-read counts of a decode step;
  `threads.py`: torch's CPU thread count.
"""

from nudgeability.engine.engine import Engine, EngineStats
from nudgeability.engine.errors import EngineInputError, UnsupportedModelError
from nudgeability.engine.sampling_params import SamplingParams
from nudgeability.engine.scheduler import GroupShape, batch_cost
from nudgeability.engine.sequence import Completion, ForkRequest

__all__ = [
    "Engine",
    "EngineStats",
    "EngineInputError",
    "UnsupportedModelError",
    "SamplingParams",
    "GroupShape",
    "batch_cost",
    "Completion",
    "ForkRequest",
]
