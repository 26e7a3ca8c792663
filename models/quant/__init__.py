"""Quantised checkpoints loaded directly: FP8 blocks, compressed-tensors W4A16, bitsandbytes 4-bit.

- `load_quantized(directory, device, dtype)`: an ordinary HF causal LM whose quantised linears keep
  their quantised storage (`loader.py`);
- the linears, one file per format: `fp8_linear.py`, `w4a16_linear.py`, `bnb4_linear.py`;
- `write_fp8`, `write_w4a16`, `write_bnb4`: make such checkpoints from an HF model (`writers.py`);
- `QuantCheckpointError`: every bad checkpoint, naming the tensor or config key (`checkpoint.py`);
- the compute modes `exact`, `fused`, `dense`, `compute_paths(model)` and `kernels_run(model)`
  (`compute.py`); the fused kernels per backend: `cpu_kernels.py` (with the numba kernels in
  `lut_kernels.py`), `cuda_kernels.py` (`scaled_mm.py`), `triton_kernels.py`; on CUDA each
  kernel is checked once per shape against the exact path (`self_check.py`).
"""

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
