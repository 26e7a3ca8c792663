"""Prefill a prefix once, fork it into many arms, batch everything continuously."""

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
