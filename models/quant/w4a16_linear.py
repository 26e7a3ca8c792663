"""compressed-tensors `pack-quantized` linear (the Gemma 4 W4A16 layout, `quant_method: "compressed-tensors"`).

Layout, as `compressed_tensors/compressors/pack_quantized/` (0.20) writes it, for a linear `X` with
weights `num_bits` b (4 or 8), `strategy` group (group size G) or channel (G = in):
- `X.weight_packed`: int32 [out, ceil(in*b/32)]. Input column j sits in word j // (32/b) at bits
  [b*(j % (32/b)), b*(j % (32/b)) + b): element 0 is the lowest bits. The stored field is q + 2^(b-1).
- `X.weight_scale`: the original float dtype, [out, in/G].
- `X.weight_shape`: [out, in], int32 or int64.
- `X.weight_zero_point` (asymmetric only): the zero points [out, in/G] packed the same way along
  the *rows*, int32 [ceil(out*b/32), in/G]. Symmetric files may carry one; it is ignored, as the
  compressor drops it.
- `X.weight_g_idx` (optional, older activation-ordered files): the group of each input column.
- `W[r, j] = (float(q[r, j]) - float(zp[r, g(j)])) * scale[r, g(j)]`, computed in the scale's
  dtype, g(j) = j // G or g_idx[j] — the same operations, in the same dtype, as the library's
  `dequantize`, so the result is bit-identical to its decompression.

Compute (`compute.py`): `exact` unpacks the packed weight on every forward (any device), then
casts it to the activations' dtype. `fused` (4-bit, no activation order): on CPU this project's
fp32 kernel reads `weight_packed` as it is (`cpu_kernels.w4a16_simd_path`); `fused-bf16` on CPU
repacks for torch's int4 kernel (`cpu_kernels.int4pack_path`, bf16); on CUDA both take
`cuda_kernels.w4a16_path` (tinygemm, or this project's Triton kernel where tinygemm does not take
the shape). 8-bit weights and g_idx orders keep the exact path.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
from torch import nn

from nudgeability.models.quant.checkpoint import (
    CheckpointReader,
    QuantCheckpointError,
    ceil_div,
    quant_config_key,
)
from nudgeability.models.quant.compute import FusedPath, QuantLinearBase

SUPPORTED_BITS = (4, 8)
SCALE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _fields(packed: torch.Tensor, num_bits: int, count: int) -> torch.Tensor:
    """The unsigned b-bit fields (uint8) of int32 words packed along the last dim, `count` per row.

    Works on bytes: field j of a word is byte j (8 bits) or the low/high nibble of byte j // 2
    (4 bits), the words being read little-endian whatever the host's byte order.
    """
    rows = packed.shape[:-1]
    # reshape(-1) rather than contiguous(): a transposed single row counts as contiguous but keeps
    # a last stride != 1, which a byte view refuses
    data = packed.reshape(-1).view(torch.uint8).view(*rows, -1, 4)
    if sys.byteorder == "big":
        data = data.flip(-1)
    data = data.flatten(-2)
    if num_bits == 4:
        data = torch.stack((data & 0xF, data >> 4), dim=-1).flatten(-2)
    return data[..., :count]


def unpack_int32(packed: torch.Tensor, num_bits: int, count: int) -> torch.Tensor:
    """Signed b-bit values (int8, b in {4, 8}) from int32 words packed along the last dim, `count` per row."""
    return (_fields(packed, num_bits, count).to(torch.int16) - (1 << (num_bits - 1))).to(torch.int8)


def dequantize_pack_quantized(
    packed: torch.Tensor,
    scale: torch.Tensor,
    num_bits: int,
    in_features: int,
    zero_point_packed: torch.Tensor | None = None,
    g_idx: torch.Tensor | None = None,
) -> torch.Tensor:
    """The [out, in] weight in the scale's dtype (see the module docstring for the formula).

    The integer steps are exact in any float dtype (|q - zp| <= 255), so doing them in place on
    one float tensor gives the library's result bit for bit with one weight-sized buffer.
    """
    out, groups = scale.shape
    w = _fields(packed, num_bits, in_features).to(scale.dtype)
    w.sub_(1 << (num_bits - 1))
    zp = None
    if zero_point_packed is not None:
        zp = (
            unpack_int32(zero_point_packed.t(), num_bits, out).t().to(scale.dtype)
        )  # packed along rows
    if g_idx is not None:
        idx = g_idx.long()
        if zp is not None:
            w.sub_(zp[:, idx])
        return w.mul_(scale[:, idx])
    grouped = w.view(out, groups, in_features // groups)
    if zp is not None:
        grouped.sub_(zp.unsqueeze(-1))
    grouped.mul_(scale.unsqueeze(-1))
    return w


class PackQuantizedLinear(QuantLinearBase):
    """A linear layer whose weight stays packed b-bit integers with per-group scales (and zero points)."""

    format_name = "w4a16"

    def __init__(
        self,
        weight_packed: torch.Tensor,
        weight_scale: torch.Tensor,
        weight_shape: torch.Tensor,
        num_bits: int,
        weight_zero_point: torch.Tensor | None = None,
        weight_g_idx: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
    ):
        super().__init__()
        self.out_features, self.in_features = (int(v) for v in weight_shape.tolist())
        self.num_bits = num_bits
        self.register_buffer("weight_packed", weight_packed)
        self.register_buffer("weight_scale", weight_scale)
        self.register_buffer("weight_shape", weight_shape)
        self.register_buffer("weight_zero_point", weight_zero_point)
        self.register_buffer("weight_g_idx", weight_g_idx)
        self.bias = nn.Parameter(bias, requires_grad=False) if bias is not None else None

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The full-precision weight [out, in]: in the scale's dtype, then cast to `dtype` if given."""
        w = dequantize_pack_quantized(
            self.weight_packed,
            self.weight_scale,
            self.num_bits,
            self.in_features,
            self.weight_zero_point,
            self.weight_g_idx,
        )
        return w if dtype is None else w.to(dtype)

    def fused_path(self, read, bf16: bool) -> FusedPath | str:
        """A kernel for 4-bit layers in group order (see the module docstring)."""
        if self.num_bits != 4:
            return f"{self.num_bits}-bit weights"
        groups = self.weight_scale.shape[1]
        size = self.in_features // groups
        if self.weight_g_idx is not None:
            in_order = torch.arange(self.in_features, device=self.weight_g_idx.device) // size
            if not torch.equal(self.weight_g_idx.long(), in_order):
                return "activation-ordered groups (g_idx)"
        device = self.weight_scale.device.type
        if device == "cpu" and not bf16:
            from nudgeability.models.quant import cpu_kernels

            reason = cpu_kernels.simd_reason(self.in_features, size)
            if reason is not None:
                return reason
            return cpu_kernels.w4a16_simd_path(
                self.weight_packed, self.weight_scale, self._zero_point(), size, self.exact_no_bias
            )
        fields = _fields(read("weight_packed"), 4, self.in_features)
        zero_point = self._zero_point(read)
        if device == "cpu":
            from nudgeability.models.quant import cpu_kernels

            group = cpu_kernels.int4pack_group(self.out_features, self.in_features, size)
            if isinstance(group, str):
                return group
            return cpu_kernels.int4pack_path(fields, self.weight_scale, zero_point, size)
        if device == "cuda":
            from nudgeability.models.quant import cuda_kernels

            return cuda_kernels.w4a16_path(
                fields, self.weight_scale, zero_point, size, self.compute_dtype, self.weight_packed
            )
        return f"no fused kernel on {device}"

    def _zero_point(self, read=None) -> torch.Tensor | None:
        """The signed zero points [out, groups] (int8), or None for a symmetric layer."""
        if self.weight_zero_point is None:
            return None
        packed = read("weight_zero_point") if read else self.weight_zero_point
        return unpack_int32(packed.t(), 4, self.out_features).t()

    def extra_repr(self) -> str:
        groups = self.weight_scale.shape[1]
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, num_bits={self.num_bits}, "
            f"group_size={self.in_features // groups}, symmetric={self.weight_zero_point is None}, "
            f"bias={self.bias is not None}, compute={self.compute_path}"
        )


@dataclass(frozen=True)
class WeightArgs:
    """The `weights` entry of one config group, validated."""

    group: str
    targets: tuple[str, ...]
    num_bits: int
    symmetric: bool
    group_size: int | None  # None: one group per row (channel strategy)


@dataclass(frozen=True)
class PackQuantizedScheme:
    """The compressed-tensors pack-quantized format as a `quantization_config` describes it."""

    groups: tuple[WeightArgs, ...]
    ignore: tuple[str, ...]
    quant_method: str = "compressed-tensors"
    quant_suffixes: tuple[str, ...] = (
        ".weight_packed",
        ".weight_scale",
        ".weight_shape",
        ".weight_zero_point",
        ".weight_g_idx",
    )

    @classmethod
    def from_config(cls, qcfg: dict, where) -> PackQuantizedScheme:
        """Validate `quantization_config`; `where` (the config.json path) goes into error messages."""

        def bad(key: str, value, what: str) -> QuantCheckpointError:
            return QuantCheckpointError(f"{where}: {quant_config_key(key)}={value!r} {what}")

        fmt = qcfg.get("format")
        if fmt != "pack-quantized":
            raise bad(
                "format",
                fmt,
                "is not supported; only 'pack-quantized' (int weights packed in int32)",
            )
        status = qcfg.get("quantization_status", "compressed")
        if status != "compressed":
            raise bad(
                "quantization_status", status, "is not supported; only 'compressed' checkpoints"
            )
        for key in ("sparsity_config", "transform_config", "kv_cache_scheme"):
            if qcfg.get(key):
                raise bad(key, qcfg[key], "is not supported; only plain weight quantisation")
        config_groups = qcfg.get("config_groups")
        if not isinstance(config_groups, dict) or not config_groups:
            raise bad("config_groups", config_groups, "must map group names to schemes")
        groups = []
        for gname, scheme in config_groups.items():
            prefix = f"config_groups.{gname}"
            if scheme.get("format", fmt) not in (None, "pack-quantized"):
                raise bad(
                    f"{prefix}.format",
                    scheme.get("format"),
                    "is not supported; only 'pack-quantized'",
                )
            for act in ("input_activations", "output_activations"):
                if scheme.get(act):
                    raise bad(
                        f"{prefix}.{act}",
                        scheme[act],
                        "is not supported; W4A16 keeps activations unquantised",
                    )
            w = scheme.get("weights")
            if not isinstance(w, dict):
                raise bad(f"{prefix}.weights", w, "must describe the weight quantisation")
            if w.get("type", "int") != "int":
                raise bad(f"{prefix}.weights.type", w.get("type"), "is not supported; only 'int'")
            bits = w.get("num_bits")
            if bits not in SUPPORTED_BITS:
                raise bad(
                    f"{prefix}.weights.num_bits",
                    bits,
                    "is not supported; pack-quantized weights must be 4 or 8 bits",
                )
            if w.get("dynamic", False):
                raise bad(
                    f"{prefix}.weights.dynamic",
                    w.get("dynamic"),
                    "is not supported; weights must be static",
                )
            strategy = w.get("strategy")
            if strategy == "group":
                size = w.get("group_size")
                if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
                    raise bad(f"{prefix}.weights.group_size", size, "must be a positive integer")
            elif strategy == "channel":
                size = None
            else:
                raise bad(
                    f"{prefix}.weights.strategy",
                    strategy,
                    "is not supported; only 'group' or 'channel'",
                )
            targets = scheme.get("targets") or []
            groups.append(
                WeightArgs(gname, tuple(targets), bits, bool(w.get("symmetric", True)), size)
            )
        return cls(groups=tuple(groups), ignore=tuple(qcfg.get("ignore") or ()))

    def match(self, name: str, module: nn.Module) -> WeightArgs | None:
        """The config group that quantises module `name` (compressed-tensors' own matching), if any."""
        from compressed_tensors.utils.match import is_match

        for group in self.groups:
            if is_match(name, module, group.targets, self.ignore):
                return group
        return None

    def quantizes(self, name: str, module: nn.Module) -> bool:
        return isinstance(module, nn.Linear) and self.match(name, module) is not None

    def unused_hint(self, key: str) -> str:
        if key.endswith(".weight_zero_point"):
            return (
                " (zero points, but its config group says symmetric: true; a checkpoint written "
                "asymmetric needs symmetric: false)"
            )
        return ""

    def load_linear(
        self, reader: CheckpointReader, name: str, linear: nn.Linear, device, dtype: torch.dtype
    ) -> PackQuantizedLinear:
        """Read linear `name`'s packed tensors (checked) into a `PackQuantizedLinear` on `device`."""
        args = self.match(name, linear)
        out, inp = linear.out_features, linear.in_features
        bits = args.num_bits
        size = args.group_size or inp
        if inp % size:
            raise QuantCheckpointError(
                f"{reader.config_path}: {quant_config_key(f'config_groups.{args.group}.weights.group_size')}={size} "
                f"does not divide {name}'s {inp} input features; add {name!r} to quantization_config.ignore"
            )
        groups = inp // size
        packed = reader.require(
            f"{name}.weight_packed", (out, ceil_div(inp * bits, 32)), (torch.int32,)
        )
        scale = reader.require(
            f"{name}.weight_scale",
            (out, groups),
            SCALE_DTYPES,
            why=f"one scale per group of {size}",
        )
        shape = reader.require(f"{name}.weight_shape", (2,), (torch.int32, torch.int64))
        if shape.tolist() != [out, inp]:
            raise QuantCheckpointError(
                f"{reader.file_of(name + '.weight_shape')}: tensor {name + '.weight_shape'!r} is {shape.tolist()}, "
                f"but the model's {name} is [{out}, {inp}]"
            )
        zero_point = None
        if not args.symmetric:
            zero_point = reader.require(
                f"{name}.weight_zero_point",
                (ceil_div(out * bits, 32), groups),
                (torch.int32,),
                why=f"config group {args.group!r} is asymmetric (symmetric: false), so zero points are required",
            ).to(device)
        g_idx = None
        if reader.has(f"{name}.weight_g_idx"):
            g_idx = reader.require(f"{name}.weight_g_idx", (inp,), (torch.int32, torch.int64))
            if g_idx.numel() and (int(g_idx.min()) < 0 or int(g_idx.max()) >= groups):
                raise QuantCheckpointError(
                    f"{reader.file_of(name + '.weight_g_idx')}: tensor {name + '.weight_g_idx'!r} has group "
                    f"indices outside [0, {groups})"
                )
            g_idx = g_idx.to(device)
        bias = (
            reader.load_float(f"{name}.bias", (out,), device, dtype)
            if linear.bias is not None
            else None
        )
        return PackQuantizedLinear(
            packed.to(device), scale.to(device), shape.to(device), bits, zero_point, g_idx, bias
        )
