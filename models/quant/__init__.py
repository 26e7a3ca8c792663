"""Quantised checkpoints loaded directly: FP8 blocks, W4A16 and bitsandbytes 4-bit."""

from nudgeability.models.quant.bnb4_linear import BnB4Linear
from nudgeability.models.quant.checkpoint import QuantCheckpointError
from nudgeability.models.quant.compute import (
    DEFAULT_COMPUTE,
    QUANT_COMPUTES,
    QuantComputeError,
    compute_paths,
    kernels_run,
)
from nudgeability.models.quant.fp8_linear import FP8BlockLinear
from nudgeability.models.quant.loader import load_quantized
from nudgeability.models.quant.w4a16_linear import PackQuantizedLinear
from nudgeability.models.quant.writers import write_bnb4, write_fp8, write_w4a16

__all__ = [
    "DEFAULT_COMPUTE",
    "QUANT_COMPUTES",
    "QuantComputeError",
    "compute_paths",
    "kernels_run",
    "BnB4Linear",
    "FP8BlockLinear",
    "PackQuantizedLinear",
    "QuantCheckpointError",
    "load_quantized",
    "write_bnb4",
    "write_fp8",
    "write_w4a16",
]
