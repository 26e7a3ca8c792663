"""What the CPU stand-ins of CUDA's attention kernels share (tests/engine/attention/test_static_decode.py,
test_cuda_kernel_choice.py, test_prefill_chunk_cuda.py)."""

from __future__ import annotations

import torch


def lse_padded(lse: torch.Tensor, m: int) -> torch.Tensor:
    """The memory-efficient kernel's log-sum-exp as it returns it: padded with zeros to a
    multiple of 32 queries (`lse_kernels.attend_cuda` slices the `m` real ones back)."""
    width = -(-m // 32) * 32
    return torch.cat([lse, lse.new_zeros(*lse.shape[:-1], width - m)], dim=-1)
