"""Fused CUDA paths for the three formats (chosen at load, one per layer; `FusedPath.name` says which).

- **W4A16** (`w4a16_path`): torch's tinygemm `_weight_int4pack_mm` (SM80+, bf16 activations;
  N % 8 == 0, K a multiple of 16 * innerKTiles, groups 32..256). At load the 4-bit fields are
  packed two per byte (even column in the high nibble) and tiled by `_convert_weight_to_int4pack`,
  and each group's (s, z = -zp * s) goes into the [K/G, N, 2] bf16 `scales_and_zeros`, for the
  kernel's `(f - 8) * s + z`. Other layers, and fp16 or fp32 activations, use this project's
  Triton kernel on the checkpoint's own packing (`triton_kernels.w4a16_matmul`).
- **FP8 blocks** (`fp8_path`): the Triton weight-only kernel (`triton_kernels.fp8_matmul`: bf16
  activations, the FP8 weight decoded in registers) for up to `SCALED_MM_MIN_ROWS` rows, where
  decode lives; for more rows on SM90 with CUDA >= 12.9, `torch._scaled_mm` with blockwise scales
  (activations quantised to FP8 in 1x128 blocks, the checkpoint's 128x128 weight scales), if a
  probe on the first such call agrees with the Triton kernel; else Triton again.
- **NF4 / FP4** (`nf4_path`): bitsandbytes' CUDA kernels through `matmul_4bit` (its fused GEMV at
  one row) when bitsandbytes has a CUDA library; else this project's Triton kernel.

These paths are checked against the exact ones on a GPU by `benchmarks/gpu_quant.py`; the Triton
kernels are also checked on CPU under `TRITON_INTERPRET=1` (tests/models/quant/test_triton_kernels.py).
"""

from __future__ import annotations

import torch

from nudgeability.models.quant import triton_kernels
from nudgeability.models.quant.compute import FusedPath

TINYGEMM_GROUPS = (32, 64, 128, 256)
SCALED_MM_MIN_ROWS = 128  # below this, the weight-only Triton kernel (published: faster at M <= 64)


def tinygemm_reason(out_features: int, in_features: int, group_size: int, device) -> str | None:
    """Why tinygemm cannot take the layer here, or None."""
    if torch.device(device).type != "cuda":
        return "not on CUDA"
    if torch.cuda.get_device_capability(device) < (8, 0):
        return "tinygemm needs SM80+"
    if group_size not in TINYGEMM_GROUPS or out_features % 8 or in_features % 32:
        return f"[{out_features}, {in_features}] group {group_size}"
    return None


def w4a16_path(
    fields: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None, group_size: int
) -> FusedPath | str:
    """tinygemm where it takes the layer (bf16 activations), else the Triton kernel."""
    out_features, in_features = fields.shape
    signed_zp = None if zero_point is None else zero_point.to(torch.int32).contiguous()
    packed_words = _repack_int32(fields)
    scale = scale.contiguous()

    def triton_run(x: torch.Tensor) -> torch.Tensor:
        return triton_kernels.w4a16_matmul(x, packed_words, scale, signed_zp, group_size)

    reason = tinygemm_reason(out_features, in_features, group_size, fields.device)
    if reason is not None:
        if not triton_kernels.available():
            return f"{reason}, and no Triton (pip install '.[gpu]')"
        return FusedPath("triton_w4a16", triton_run, (packed_words, scale))
    inner = next(t for t in (8, 4, 2) if in_features % (16 * t) == 0)
    f = fields.to(torch.uint8)
    two_per_byte = ((f[:, ::2] << 4) | f[:, 1::2]).contiguous()
    tiled = torch.ops.aten._convert_weight_to_int4pack(two_per_byte, inner)
    s = scale.to(torch.float32)
    z = torch.zeros_like(s) if zero_point is None else -zero_point.to(torch.float32) * s
    scales_and_zeros = torch.stack((s, z), -1).transpose(0, 1).contiguous().to(torch.bfloat16)

    def run(x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.bfloat16:
            return triton_run(x)
        return torch.ops.aten._weight_int4pack_mm(
            x.contiguous(), tiled, group_size, scales_and_zeros
        )

    return FusedPath("tinygemm_int4pack_mm", run, (tiled, scales_and_zeros, packed_words, scale))


def _repack_int32(fields: torch.Tensor) -> torch.Tensor:
    """Fields f [N, K] (0..15) as compressed-tensors int32 words (8 per word, column j at 4*(j%8))."""
    out_features, in_features = fields.shape
    padded = torch.nn.functional.pad(fields.to(torch.int64), (0, (-in_features) % 8))
    words = (padded.view(out_features, -1, 8) << (4 * torch.arange(8, device=fields.device))).sum(
        -1
    )
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32).contiguous()


def fp8_path(
    weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int]
) -> FusedPath | str:
    """The Triton weight-only kernel, and `_scaled_mm` for many rows where it works (docstring)."""
    if not triton_kernels.available():
        return "no Triton (pip install '.[gpu]')"
    scale = scale_inv.to(torch.float32).contiguous()
    state = {"scaled_mm": _scaled_mm_possible(weight, block)}

    def run(x: torch.Tensor) -> torch.Tensor:
        if state["scaled_mm"] and x.shape[0] >= SCALED_MM_MIN_ROWS:
            try:
                return _scaled_mm_blockwise(x, weight, scale)
            except RuntimeError:
                state["scaled_mm"] = False
        return triton_kernels.fp8_matmul(x, weight, scale, block)

    return FusedPath("triton_fp8(+scaled_mm)", run, (weight, scale))


def _scaled_mm_possible(weight: torch.Tensor, block: tuple[int, int]) -> bool:
    if weight.device.type != "cuda":
        return False
    major, _ = torch.cuda.get_device_capability(weight.device)
    cuda = tuple(int(v) for v in (torch.version.cuda or "0.0").split(".")[:2])
    n, k = weight.shape
    return (
        major == 9
        and cuda >= (12, 9)
        and tuple(block) == (128, 128)
        and n % 128 == 0
        and k % 128 == 0
    )


def _scaled_mm_blockwise(
    x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """W8A8: x quantised per 1x128 block (amax / 448), then cuBLAS blockwise `_scaled_mm`."""
    rows, width = x.shape
    pad = (-rows) % 4  # cuBLAS wants M a multiple of 4
    xs = torch.nn.functional.pad(x.float(), (0, 0, 0, pad)).view(rows + pad, width // 128, 128)
    amax = xs.abs().amax(-1).clamp_min(1e-12)
    x_scale = amax / 448.0
    x8 = (xs / x_scale[..., None]).to(torch.float8_e4m3fn).view(rows + pad, width)
    y = torch._scaled_mm(
        x8,
        weight.t(),
        scale_a=x_scale.t().contiguous().t(),  # outer-dim-major [M, K/128]
        scale_b=scale.t().contiguous().t(),
        out_dtype=x.dtype if x.dtype != torch.float32 else torch.bfloat16,
    )
    return y[:rows].to(x.dtype)


def nf4_path(layer) -> FusedPath | str:
    """bitsandbytes' own CUDA kernels when installed with CUDA, else the Triton 4-bit kernel."""
    if _bnb_has_cuda():
        import bitsandbytes as bnb

        state = layer.quant_state()

        def run_bnb(x: torch.Tensor) -> torch.Tensor:
            return bnb.matmul_4bit(x, layer.weight, quant_state=state).to(x.dtype)

        return FusedPath("bnb_matmul_4bit_cuda", run_bnb)
    if not triton_kernels.available():
        return "no Triton (pip install '.[gpu]') and no CUDA bitsandbytes"
    absmax = layer.block_absmax().contiguous()
    table = layer.weight_quant_map.to(torch.float32).contiguous()
    weight = layer.weight

    def run(x: torch.Tensor) -> torch.Tensor:
        return triton_kernels.nf4_matmul(
            x, weight, absmax, table, layer.blocksize, layer.out_features
        )

    return FusedPath("triton_4bit", run, (absmax, table))


def _bnb_has_cuda() -> bool:
    try:
        from bitsandbytes.cextension import BNB_BACKEND, lib  # noqa: F401
    except Exception:  # not installed (the GPU image), or no native library
        return False
    return BNB_BACKEND == "CUDA" and lib is not None and not type(lib).__name__.startswith("Error")
