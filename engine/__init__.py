"""nudgeability.engine: prefill a prefix once, fork it into many arms, batch everything continuously.

Where each concept lives (engine/README.md tells how they fit):

- `engine.py`: `Engine` (generate / fork / fork_many, and the streaming submit / step / peek /
  release) and the step loop; `requests.py`: submitted work as groups and rows, and its checks;
  `sequence.py`: requests, rows, groups, KV runs, results, `FINISH_REASONS`;
  `sampling/sampling_params.py`, `sampling/sampler.py`: decoding; `outputs.py`: what a chosen token does to its row;
  `suffix_scores.py`: an arm's suffix log-probabilities from its own prefill (`score_suffix`).
- `scheduling/scheduler.py`: what each step computes, admission and preemption; `GroupShape.of` (an empty
  suffix borrows the prefix's last token) and `batch_cost` (a budget's check before a run).
- `kv/kv_pool.py`: the KV pool in blocks; `kv/kv_cache.py`: the HF `Cache` that writes into it.
- `scheduling/step_layout.py`: one forward's tokens, slots and spans; `attention/shared_prefix_attention.py`: the
  cascade attention over them.
- `model_runner.py`: the HF model behind it, rows padded to `MIN_ROWS`; `errors.py`:
  `EngineInputError`, `UnsupportedModelError`; `util/threads.py`: torch's CPU thread count. The
  aten-op and host-read counts of a decode step are measured outside it (benchmarks/benchkit/profile.py).
"""

from nudgeability.engine.engine import Engine
from nudgeability.engine.engine_stats import EngineStats, StepRecord
from nudgeability.engine.errors import EngineInputError, UnsupportedModelError
from nudgeability.engine.sampling.sampling_params import SamplingParams
from nudgeability.engine.scheduling.group_shape import GroupShape, batch_cost
from nudgeability.engine.sequence import Completion, ForkRequest, SequenceRef

__all__ = [
    "Engine",
    "EngineStats",
    "StepRecord",
    "EngineInputError",
    "UnsupportedModelError",
    "SamplingParams",
    "GroupShape",
    "batch_cost",
    "Completion",
    "ForkRequest",
    "SequenceRef",
]
