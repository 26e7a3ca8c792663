"""Fused CPU kernels for the three formats: each computes from the quantised storage directly.

- **W4A16** (`int4pack_path`): torch's `_weight_int4pack_mm_for_cpu`. At load the checkpoint's
  4-bit fields f (0..15, the stored q + 8) are packed by `_convert_weight_to_int4pack_for_cpu`,
  and each group's scale s and zero point zp become the kernel's float-domain pair
  (s, z = -zp * s), so that the kernel's `(f - 8) * s + z` is the checkpoint's `(q - zp) * s`.
  The kernel takes bf16 activations, scales and zeros, dequantises each weight in fp32, sums in
  fp32 and rounds its output to bf16 (`aten/src/ATen/native/cpu/int4mm_kernel.cpp`); with fp32
  activations it has only a slow scalar path. So activations are cast to bf16 and the result
  back: per layer, a relative error of about 2^-8 against the exact path. It takes N % 16 == 0
  and group sizes 32, 64, 128 or 256; a larger group (or the channel strategy) is given as
  several kernel groups with the same scale, which is exact.
- **NF4 / FP4** (`bnb_cpu_path`): bitsandbytes' own CPU kernel (`gemv_4bit`, "any M via tiled
  GEMM"), on CPUs with AVX512-BF16. bitsandbytes repacks the weight for it
  (`_convert_weight_packed_for_cpu`, as transformers does) and computes with bf16 activations and
  bf16 block absmax, output bf16. Elsewhere bitsandbytes has no fused CPU kernel (it dequantises
  and calls `F.linear`), so `lut_path` is used.
- **FP8 blocks and NF4 without AVX512-BF16** (`lut_path`): this project's numba kernels. Each
  weight code is looked up in its format's table (256 FP8 values, or the 16 NF4/FP4 levels) into
  a buffer of one block, dotted with every activation row in fp32, and the block sum multiplied
  by its scale: y[m, n] = sum_b s[n, b] * sum_{k in b} x[m, k] * table[code[n, k]]. fp32
  activations, fp32 sums: the exact path's result up to fp32 summation order. These kernels
  beat dequantisation only while the weight read dominates: above `LUT_MAX_ROWS` rows (a
  prefill) the layer dequantises and calls `F.linear` as the exact path does (same precision,
  fp32 either way).
"""

from __future__ import annotations

import copy
from functools import lru_cache

import numpy as np
import torch

from nudgeability.models.quant.compute import FusedPath

INT4PACK_GROUPS = (256, 128, 64, 32)
LUT_MAX_ROWS = 32  # above this many rows, the table kernels hand over to dequantise + F.linear  # what _weight_int4pack_mm_for_cpu takes, largest first


def int4pack_group(out_features: int, in_features: int, group_size: int) -> int | str:
    """The kernel group size for a checkpoint's group size, or why the kernel cannot take the layer."""
    if out_features % 16:
        return f"{out_features} outputs, the int4 kernel needs a multiple of 16"
    for g in INT4PACK_GROUPS:
        if group_size % g == 0 and in_features % g == 0:
            return g
    return f"group size {group_size}, the int4 kernel needs a multiple of 32"


def int4pack_path(
    fields: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None, group_size: int
) -> FusedPath:
    """The int4 kernel's path for fields f [N, K] (uint8 0..15), scales [N, K/G] and signed zero
    points [N, K/G] (None: symmetric); `int4pack_group` must have accepted the shape."""
    out_features, in_features = fields.shape
    g = int4pack_group(out_features, in_features, group_size)
    assert isinstance(g, int), g
    repeat = group_size // g
    s = scale.to(torch.float32)
    z = torch.zeros_like(s) if zero_point is None else -zero_point.to(torch.float32) * s
    # [K/g, N, 2] bf16, each checkpoint group's (s, z) repeated over its kernel groups
    pairs = torch.stack((s, z), dim=-1).repeat_interleave(repeat, dim=1)
    scales_and_zeros = pairs.transpose(0, 1).contiguous().to(torch.bfloat16)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(fields.to(torch.int32), 1)

    def run(x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.to(torch.bfloat16).contiguous(), packed, g, scales_and_zeros
        )
        return y.to(x.dtype)

    return FusedPath("int4pack_mm_cpu(bf16)", run, (packed, scales_and_zeros))


@lru_cache(maxsize=1)
def bnb_has_cpu_kernel() -> bool:
    """Whether bitsandbytes' fused CPU 4-bit kernel runs here (it needs AVX512-BF16)."""
    from bitsandbytes.functional import has_avx512bf16

    return bool(has_avx512bf16())


def bnb_cpu_reason(out_features: int, in_features: int, blocksize: int) -> str | None:
    """Why bitsandbytes' CPU kernel cannot take the layer, or None."""
    if not bnb_has_cpu_kernel():
        return "no AVX512-BF16 for bitsandbytes' CPU kernel"
    if out_features % 32 or in_features % 2 or in_features % blocksize:
        return f"[{out_features}, {in_features}] with blocksize {blocksize}"
    return None


def bnb_cpu_path(weight: torch.Tensor, quant_state) -> FusedPath:
    """bitsandbytes' CPU kernel on its own repacking of `weight` (the state is copied, not changed)."""
    import bitsandbytes as bnb
    from bitsandbytes.functional import _convert_weight_packed_for_cpu

    packed, state = _convert_weight_packed_for_cpu(weight.clone(), copy.deepcopy(quant_state))

    def run(x: torch.Tensor) -> torch.Tensor:
        return bnb.matmul_4bit(x, packed, quant_state=state).to(x.dtype)

    return FusedPath("bnb_gemv_4bit_cpu(bf16)", run, (packed, state.absmax))


def fp8_table() -> np.ndarray:
    """The float32 value of each of the 256 float8_e4m3fn codes (the two NaN codes as 0)."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn)
    values = codes.to(torch.float32)
    return torch.where(values.isnan(), 0.0, values).numpy()


def lut_fp8_path(
    weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int], exact
) -> FusedPath:
    """The numba FP8 block kernel on `weight` (float8_e4m3fn [N, K]) and its [N/B0, K/B1] scales;
    `exact(x)` computes a layer of more than `LUT_MAX_ROWS` rows."""
    codes = weight.view(torch.uint8).numpy()
    scales = scale_inv.to(torch.float32).contiguous()
    table = fp8_table()
    b0, b1 = block

    def run(x: torch.Tensor) -> torch.Tensor:
        from nudgeability.models.quant import lut_kernels

        if x.shape[0] > LUT_MAX_ROWS:
            return exact(x)
        xs = x.to(torch.float32).contiguous()
        out = torch.empty(xs.shape[0], codes.shape[0], dtype=torch.float32)
        lut_kernels.fp8_block_matmul(xs.numpy(), codes, scales.numpy(), table, b0, b1, out.numpy())
        return out.to(x.dtype)

    return FusedPath("lut_fp8_numba(fp32)", run, (weight, scales))


def lut_4bit_path(
    weight: torch.Tensor, absmax: torch.Tensor, code: torch.Tensor, blocksize: int, shape, exact
) -> FusedPath:
    """The numba 4-bit kernel on bitsandbytes' packed codes (high nibble first) and fp32 absmax;
    `exact(x)` computes a layer of more than `LUT_MAX_ROWS` rows."""
    out_features, in_features = shape
    codes = weight.view(torch.uint8).reshape(-1).numpy()
    absmax = absmax.to(torch.float32).contiguous()
    table = code.to(torch.float32).contiguous().numpy()

    def run(x: torch.Tensor) -> torch.Tensor:
        from nudgeability.models.quant import lut_kernels

        if x.shape[0] > LUT_MAX_ROWS:
            return exact(x)
        xs = x.to(torch.float32).contiguous()
        out = torch.empty(xs.shape[0], out_features, dtype=torch.float32)
        lut_kernels.nibble_matmul(xs.numpy(), codes, absmax.numpy(), table, blocksize, out.numpy())
        return out.to(x.dtype)

    return FusedPath("lut_4bit_numba(fp32)", run, (weight, absmax))
