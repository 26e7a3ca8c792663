"""nudgeability.engine: prefill a prefix once, fork it into many arms, decode them as one batch."""

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
