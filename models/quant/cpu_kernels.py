"""Fused CPU paths for the three formats: each computes from the quantised storage directly.

`fused` (the default) takes this project's fp32 kernels (`numba_kernels.py`, on the explicit
SIMD of `simd.py`). They read the checkpoint's tensors as they are stored, with no repacked copy:

- **W4A16** (`w4a16_simd_path`, `w4a16_simd(fp32)`): compressed-tensors' `weight_packed` words
  read as bytes, the group scales (float32, a converted copy when stored in bf16/fp16) and, for
  asymmetric checkpoints, 8 + the zero points as a small float32 [out, groups] table.
- **NF4 / FP4** (`nibble_simd_path`, `nibble_table_simd(fp32)`): bitsandbytes' packed codes, the
  code table, and the float32 absmax of every block (the double quantisation undone once at load,
  as bitsandbytes does on every call).
- **FP8 blocks** (`fp8_simd_path`, `fp8_simd(fp32)`): the e4m3 weight bytes and the block scales
  times 256 (float32, a tiny copy).

Activations are float32 (other dtypes are converted exactly and the result converted back);
each weight is decoded to exactly the value the format's library dequantises to, rounded as the
exact path rounds it, and the products are summed in float32: the result differs from `exact`
only by the order of the float32 sums (bounded by gamma(K) * sum |x w|). Above `SIMD_MAX_ROWS`
rows (48 to 96, a prefill) a layer dequantises and calls `F.linear`, as `exact` does: one matrix
multiply then beats decoding the weight again for every six rows. The kernels need in_features and the
group or block width along it in multiples of 32 (16 for FP8 blocks), a little-endian CPU and,
on x86, F16C (every x86 CPU since 2012); other layers keep the exact path, named in a warning.

`fused-bf16` takes the libraries' bf16 kernels instead, where they are faster and the bf16
rounding is acceptable:

- **W4A16** (`int4pack_path`, `int4pack_mm_cpu(bf16)`): torch's `_weight_int4pack_mm_for_cpu`.
  At load the fields f (0..15, the stored q + 8) are packed by
  `_convert_weight_to_int4pack_for_cpu`, and each group's scale s and zero point zp become the
  kernel's float-domain pair (s, z = -zp * s), so that the kernel's `(f - 8) * s + z` is the
  checkpoint's `(q - zp) * s`. The kernel takes bf16 activations, scales and zeros, sums in fp32
  and rounds its output to bf16 (`aten/src/ATen/native/cpu/int4mm_kernel.cpp`): a relative error
  of about 2^-8 per layer. It takes N % 16 == 0 and group sizes 32..256 (a larger group is given
  as several kernel groups with the same scale, which is exact).
- **NF4 / FP4** (`bnb_cpu_path`, `bnb_gemv_4bit_cpu(bf16)`): bitsandbytes' own CPU kernel
  (`gemv_4bit`, "any M via tiled GEMM"), on CPUs with AVX512-BF16: bitsandbytes repacks the weight
  (`_convert_weight_packed_for_cpu`, as transformers does) and computes with bf16 activations,
  bf16 absmax and bf16 output. Without AVX512-BF16 bitsandbytes has no fused CPU kernel (it
  dequantises and calls `F.linear`), and the fp32 kernel is used.
- **FP8** has no bf16 CPU kernel: `fused-bf16` is `fused`.
"""

from __future__ import annotations

import copy
import platform
import sys
from collections.abc import Callable
from functools import lru_cache

import numpy as np
import torch

from nudgeability.models.quant.compute import FusedPath

# Above this many rows a fp32 path dequantises and calls F.linear: where that is measured to
# become the faster at one thread on a SmolLM2 layer, between 64 and 128 rows for the W4A16 and
# FP8 kernels and between 32 and 64 for NF4, bitsandbytes' dequantisation being fast.
SIMD_MAX_ROWS = {"w4a16_simd(fp32)": 96, "fp8_simd(fp32)": 96, "nibble_table_simd(fp32)": 48}
INT4PACK_GROUPS = (256, 128, 64, 32)  # what _weight_int4pack_mm_for_cpu takes, largest first
_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


@lru_cache(maxsize=1)
def simd_cpu_reason() -> str | None:
    """Why the fp32 SIMD kernels cannot run on this CPU, or None."""
    if sys.byteorder != "little":
        return "a big-endian CPU (the kernels read packed words as little-endian bytes)"
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        from nudgeability.models.quant.simd import cpu_features

        if "f16c" not in cpu_features():
            return "no F16C on this CPU (the kernels convert through float16)"
        return None
    if machine in ("aarch64", "arm64"):
        return None
    return f"no SIMD kernels for {machine}"


def simd_reason(in_features: int, width: int, step: int = 32) -> str | None:
    """Why the fp32 kernels cannot take a layer whose groups (or blocks) along in_features are
    `width` wide, each kernel step needing `step` columns of one group; None if they can."""
    cpu = simd_cpu_reason()
    if cpu is not None:
        return cpu
    if in_features % 32:
        return f"{in_features} inputs, the fp32 kernels need a multiple of 32"
    if width % step:
        return f"groups of {width} inputs, the fp32 kernels need a multiple of {step}"
    return None


def _simd_run(
    name: str,
    kernel: Callable,
    arguments: tuple,
    out_features: int,
    weight_dtype: torch.dtype,
    exact: Callable[[torch.Tensor], torch.Tensor],
    tensors: tuple[torch.Tensor, ...],
) -> FusedPath:
    """A FusedPath calling `kernel(x, *arguments, rounding, out)` on float32 activations."""
    from nudgeability.models.quant.numba_kernels import rounding_code

    roundings = {
        dtype: rounding_code(_DTYPE_NAMES[weight_dtype], _DTYPE_NAMES[dtype])
        for dtype in _DTYPE_NAMES
    }

    def run(x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > SIMD_MAX_ROWS[name] or x.dtype not in roundings:
            return exact(x)
        xs = x.detach().to(torch.float32).contiguous()
        out = torch.empty(xs.shape[0], out_features, dtype=torch.float32)
        kernel(xs.numpy(), *arguments, roundings[x.dtype], out.numpy())
        return out if x.dtype == torch.float32 else out.to(x.dtype)

    return FusedPath(name, run, tensors)


def w4a16_simd_path(
    packed: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    group_size: int,
    exact: Callable[[torch.Tensor], torch.Tensor],
) -> FusedPath:
    """The fp32 kernel on compressed-tensors' own int32 words [N, K/8] (read as bytes), scales
    [N, K/G] and signed zero points [N, K/G] (None: symmetric); `simd_reason` accepted it."""
    from nudgeability.models.quant import numba_kernels

    out_features = packed.shape[0]
    in_features = packed.shape[1] * 8
    data = packed.view(torch.uint8).numpy()  # [N, K/2]: byte j holds columns 2j (low), 2j+1
    scales = scale.to(torch.float32).contiguous()
    group = (np.arange(in_features // 32) * 32 // group_size).astype(np.int32)
    if zero_point is None:
        kernel, arguments = numba_kernels.w4_symmetric_matmul, (data, scales.numpy(), group)
    else:
        zero = (zero_point.to(torch.float32) + 8).contiguous()
        kernel = numba_kernels.w4_zero_point_matmul
        arguments = (data, scales.numpy(), zero.numpy(), group)
    return _simd_run(
        "w4a16_simd(fp32)", kernel, arguments, out_features, scale.dtype, exact, (packed, scales)
    )


def nibble_simd_path(
    weight: torch.Tensor,
    absmax: torch.Tensor,
    table: torch.Tensor,
    blocksize: int,
    out_features: int,
    weight_dtype: torch.dtype,
    exact: Callable[[torch.Tensor], torch.Tensor],
) -> FusedPath:
    """The fp32 kernel on bitsandbytes' packed codes, the float32 absmax of every block and the
    16-entry code table (blocksize a power of two, as bitsandbytes requires)."""
    from nudgeability.models.quant import numba_kernels

    assert blocksize & (blocksize - 1) == 0, blocksize
    codes = weight.view(torch.uint8).reshape(-1).numpy()
    absmax = absmax.to(torch.float32).contiguous()
    table = table.to(torch.float32).contiguous()
    arguments = (codes, absmax.numpy(), table.numpy(), blocksize.bit_length() - 1)
    return _simd_run(
        "nibble_table_simd(fp32)",
        numba_kernels.nibble_table_matmul,
        arguments,
        out_features,
        weight_dtype,
        exact,
        (weight, absmax, table),
    )


def fp8_simd_path(
    weight: torch.Tensor,
    scale_inv: torch.Tensor,
    block: tuple[int, int],
    exact: Callable[[torch.Tensor], torch.Tensor],
) -> FusedPath:
    """The fp32 kernel on the float8_e4m3fn weight [N, K] and its [N/B0, K/B1] scales."""
    from nudgeability.models.quant import numba_kernels

    out_features, in_features = weight.shape
    scales = (scale_inv.to(torch.float32) * 256.0).contiguous()  # vload_e4m3 decodes value / 256
    half_block = (np.arange(in_features // 16) * 16 // block[1]).astype(np.int32)
    arguments = (weight.view(torch.uint8).numpy(), scales.numpy(), block[0], half_block)
    return _simd_run(
        "fp8_simd(fp32)",
        numba_kernels.fp8_block_matmul,
        arguments,
        out_features,
        torch.float32,  # the exact path computes the weight in float32
        exact,
        (weight, scales),
    )


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
