"""FP8 fine-grained block linear (the Qwen3-*-FP8 layout, `quant_method: "fp8"`).

Layout, as `transformers/integrations/finegrained_fp8.py` reads it:
- `X.weight`: float8_e4m3fn, shape [out, in];
- `X.weight_scale_inv`: bf16, f16 or f32, shape [ceil(out/B0), ceil(in/B1)], with
  (B0, B1) = `quantization_config.weight_block_size` (128x128 in the real checkpoints);
- `W[i, j] = float32(weight[i, j]) * float32(scale_inv[i // B0, j // B1])` — a multiplication,
  despite the name. The last block of a dimension that is not a multiple of B is partial.

transformers infers the block from the scale grid and so fails (or silently picks a wrong block)
when a dimension is not a multiple of B; we take B from the config, so partial blocks work.

Compute (`compute.py`): `exact` dequantises the weight on every forward, on whatever device it
lives, to the activations' dtype (one fp32 multiply per element, then one rounding). `fused`
reads the FP8 weight directly: on CPU with this project's fp32 kernel
(`cpu_kernels.fp8_simd_path`: each byte decoded arithmetically, fp32 sums, 1 byte read per
weight; `fused-bf16` is the same, there being no bf16 CPU kernel); on CUDA with the
Triton weight-only kernel for small row counts and `torch._scaled_mm` with blockwise scales for
large ones where the GPU takes it (`cuda_kernels.fp8_path`). `dense` keeps a dequantised copy:
the explicit choice of speed over memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from nudgeability.models.quant.checkpoint import (
    CheckpointReader,
    QuantCheckpointError,
    ceil_div,
    quant_config_key,
    quantised_linear,
)
from nudgeability.models.quant.compute import FusedPath, QuantLinearBase

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448
SCALE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def fp8_to_float32(weight: torch.Tensor) -> torch.Tensor:
    """float8_e4m3fn -> float32, exactly (NaN codes aside, which checkpoints do not hold).

    Faster on CPU than `weight.float()` (measured; other devices use that): the 7 magnitude bits
    shifted into a float16's exponent and mantissa give the value / 256 (e4m3's bias is 7,
    float16's 15; e4m3 subnormals land on float16 subnormals), and multiplying by 256 is exact.
    """
    if weight.device.type != "cpu":
        return weight.to(torch.float32)
    bits = weight.view(torch.uint8).to(torch.int16)
    half = ((bits & 0x7F) << 7) | ((bits & 0x80) << 8)
    return half.view(torch.float16).to(torch.float32).mul_(256.0)


def dequantize_fp8_block(
    weight: torch.Tensor, scale_inv: torch.Tensor, block_size: tuple[int, int]
) -> torch.Tensor:
    """The fp32 weight `float32(weight[i, j]) * float32(scale_inv[i // B0, j // B1])`, partial blocks included."""
    rows, cols = weight.shape
    b0, b1 = block_size
    w = fp8_to_float32(weight)
    # Expand the scales over rows only and broadcast them over each column block through a view, so
    # no second weight-sized tensor is built.
    scale = scale_inv.to(torch.float32).repeat_interleave(b0, dim=0)[:rows]
    full, rem = divmod(cols, b1)
    if full:
        w[:, : full * b1].unflatten(1, (full, b1)).mul_(scale[:, :full, None])
    if rem:
        w[:, full * b1 :].mul_(scale[:, full : full + 1])
    return w


def quantize_fp8_block(
    weight: torch.Tensor, block_size: tuple[int, int], scale_dtype: torch.dtype = torch.bfloat16
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise a float [out, in] weight to (float8_e4m3fn weight, scale_inv [ceil(out/B0), ceil(in/B1)]).

    Each block's scale_inv is amax/448 rounded to `scale_dtype` first, and the block is divided by
    that rounded value, so dequantisation multiplies by exactly the scale the block was divided by.
    """
    if scale_dtype not in SCALE_DTYPES:
        raise ValueError(
            f"scale_dtype must be one of bfloat16, float16, float32, got {scale_dtype}"
        )
    rows, cols = weight.shape
    b0, b1 = block_size
    nb0, nb1 = ceil_div(rows, b0), ceil_div(cols, b1)
    w = weight.detach().to(torch.float32)
    padded = F.pad(w, (0, nb1 * b1 - cols, 0, nb0 * b0 - rows))
    amax = padded.reshape(nb0, b0, nb1, b1).abs().amax(dim=(1, 3))
    scale_inv = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax)).to(scale_dtype)
    divisor = (
        scale_inv.to(torch.float32)
        .repeat_interleave(b0, 0)[:rows]
        .repeat_interleave(b1, 1)[:, :cols]
    )
    q = (w / divisor).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q, scale_inv


class FP8BlockLinear(QuantLinearBase):
    """A linear layer whose weight stays float8_e4m3fn with per-block `weight_scale_inv`."""

    format_name = "fp8"

    def __init__(
        self,
        weight: torch.Tensor,
        weight_scale_inv: torch.Tensor,
        block_size: tuple[int, int],
        bias: torch.Tensor | None = None,
    ):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.block_size = tuple(block_size)
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale_inv", weight_scale_inv)
        self.bias = nn.Parameter(bias, requires_grad=False) if bias is not None else None

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The full-precision weight [out, in] in `dtype` (computed in fp32, rounded once)."""
        w = dequantize_fp8_block(self.weight, self.weight_scale_inv, self.block_size)
        return w if dtype == torch.float32 else w.to(dtype)

    def fused_path(self, read, bf16: bool) -> FusedPath | str:
        """A kernel that reads the FP8 weight as stored (never a copy: it is the layer's storage);
        there is no bf16 CPU kernel, so `bf16` changes nothing."""
        device = self.weight.device.type
        if device == "cpu":
            from nudgeability.models.quant import cpu_kernels

            reason = cpu_kernels.simd_reason(self.in_features, self.block_size[1], step=16)
            if reason is not None:
                return reason
            return cpu_kernels.fp8_simd_path(
                self.weight, self.weight_scale_inv, self.block_size, self.exact_no_bias
            )
        if device == "cuda":
            from nudgeability.models.quant import cuda_kernels

            return cuda_kernels.fp8_path(self.weight, self.weight_scale_inv, self.block_size)
        return f"no fused kernel on {device}"

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, block_size={self.block_size}, "
            f"scale_dtype={self.weight_scale_inv.dtype}, bias={self.bias is not None}, compute={self.compute_path}"
        )


@dataclass(frozen=True)
class FP8Scheme:
    """The FP8 block format as a `quantization_config` describes it."""

    block_size: tuple[int, int]
    modules_to_not_convert: tuple[str, ...]
    quant_method: str = "fp8"
    # Tensor-name suffixes only a quantised layer has (an unquantised layer holding one is an error).
    quant_suffixes: tuple[str, ...] = (".weight_scale_inv",)

    @classmethod
    def from_config(cls, qcfg: dict, where) -> FP8Scheme:
        """Validate `quantization_config`; `where` (the config.json path) goes into error messages."""
        fmt = qcfg.get("fmt", "e4m3")
        if fmt != "e4m3":
            raise QuantCheckpointError(
                f"{where}: {quant_config_key('fmt')}={fmt!r} is not supported; only 'e4m3'"
            )
        act = qcfg.get("activation_scheme", "dynamic")
        if act != "dynamic":
            raise QuantCheckpointError(
                f"{where}: {quant_config_key('activation_scheme')}={act!r} is not supported; only 'dynamic' "
                "(activations stay unquantised)"
            )
        scale_fmt = qcfg.get("scale_fmt") or "float"
        if scale_fmt != "float":
            raise QuantCheckpointError(
                f"{where}: {quant_config_key('scale_fmt')}={scale_fmt!r} is not supported; only 'float'"
            )
        if qcfg.get("modules_to_convert"):
            raise QuantCheckpointError(
                f"{where}: {quant_config_key('modules_to_convert')} is not supported; use modules_to_not_convert"
            )
        block = qcfg.get("weight_block_size", [128, 128])
        if (
            not isinstance(block, (list, tuple))
            or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
        ):
            raise QuantCheckpointError(
                f"{where}: {quant_config_key('weight_block_size')}={block!r} must be two positive integers "
                "[rows, cols], e.g. [128, 128]"
            )
        skip = qcfg.get("modules_to_not_convert") or []
        return cls(block_size=(block[0], block[1]), modules_to_not_convert=tuple(skip))

    def quantizes(self, name: str, module: nn.Module) -> bool:
        """Whether the checkpoint stores linear `name` in FP8 (lm_head and the skip list do not)."""
        return quantised_linear(name, module, self.modules_to_not_convert)

    def unused_hint(self, key: str) -> str:
        return ""

    def load_linear(
        self, reader: CheckpointReader, name: str, linear: nn.Linear, device, dtype: torch.dtype
    ) -> FP8BlockLinear:
        """Read linear `name`'s FP8 tensors (checked) into an `FP8BlockLinear` on `device`."""
        out, inp = linear.out_features, linear.in_features
        b0, b1 = self.block_size
        weight = reader.require(f"{name}.weight", (out, inp), (FP8_DTYPE,))
        scale = reader.require(
            f"{name}.weight_scale_inv",
            (ceil_div(out, b0), ceil_div(inp, b1)),
            SCALE_DTYPES,
            why=f"one scale per {b0}x{b1} block of the [{out}, {inp}] weight",
        )
        bias = (
            reader.load_float(f"{name}.bias", (out,), device, dtype)
            if linear.bias is not None
            else None
        )
        return FP8BlockLinear(weight.to(device), scale.to(device), self.block_size, bias)
