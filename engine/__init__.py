"""nudgeability.engine: prefill a prefix once, fork it into many arms, decode them as one batch."""

from nudgeability.engine.engine import Engine, EngineStats
from nudgeability.engine.errors import EngineInputError
from nudgeability.engine.sampling_params import SamplingParams
from nudgeability.engine.sequence import Completion, ForkRequest

__all__ = [
    "Engine",
    "EngineStats",
    "EngineInputError",
    "SamplingParams",
    "Completion",
    "ForkRequest",
]
