"""bitsandbytes 4-bit linear (the GLM-Z1 BNB4 layout, `quant_method: "bitsandbytes"`, `load_in_4bit`).

Layout, as `bitsandbytes.nn.Linear4bit` saves it (`QuantState.as_dict(packed=True)`), for a linear `X`:
- `X.weight`: uint8 [(out*in+1)//2, 1], two 4-bit codes per byte, high nibble first;
- `X.weight.absmax`: float32 [n_blocks], or uint8 under double quantisation;
- `X.weight.quant_map`: float32 [16], the NF4 (or FP4) code table;
- `X.weight.nested_absmax`, `X.weight.nested_quant_map`: the second-level state (double quant only);
- `X.weight.quant_state.bitsandbytes__nf4` (or `__fp4`): JSON bytes with quant_type, blocksize,
  dtype, shape and the nested blocksize, dtype and offset.

The tensors are parsed by bitsandbytes' own `QuantState.from_dict`. The weight stays packed in
memory. Compute (`compute.py`): `exact` is `bitsandbytes.matmul_4bit` (which on CPU in
bitsandbytes 0.50 equals `F.linear(x, dequantize_4bit(weight, quant_state))` bit for bit; nf4 and
fp4 both run on CPU). `fused`: on CPU, this project's fp32 kernel on the packed codes
(`cpu_kernels.nibble_simd_path`); `fused-bf16` on CPU, bitsandbytes' own bf16 CPU kernel where
the CPU has AVX512-BF16 (`cpu_kernels.bnb_cpu_path`); on CUDA, bitsandbytes' fused kernels
through `matmul_4bit` when bitsandbytes is installed with CUDA, else this project's Triton kernel
(`cuda_kernels.nf4_path`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from nudgeability.models.quant.checkpoint import (
    CheckpointReader,
    QuantCheckpointError,
    ceil_div,
    quant_config_key,
    quantised_linear,
)
from nudgeability.models.quant.compute import FusedPath, QuantLinearBase

QUANT_TYPES = ("nf4", "fp4")


class BnB4Linear(QuantLinearBase):
    """A linear layer whose weight stays bitsandbytes 4-bit codes with their (nested) block absmax.

    The quant state's tensors are registered buffers, so `.to(device)` moves them; `quant_state()`
    reassembles the bitsandbytes `QuantState` from them.
    """

    format_name = "bnb4"

    def __init__(self, weight: torch.Tensor, quant_state, bias: torch.Tensor | None = None):
        super().__init__()
        self.out_features, self.in_features = (int(v) for v in quant_state.shape)
        self.quant_type = quant_state.quant_type
        self.blocksize = quant_state.blocksize
        self.weight_dtype = quant_state.dtype
        self.register_buffer("weight", weight)
        self.register_buffer("weight_absmax", quant_state.absmax)
        self.register_buffer("weight_quant_map", quant_state.code)
        nested = quant_state.state2
        self.nested_blocksize = nested.blocksize if nested is not None else None
        self.nested_dtype = nested.dtype if nested is not None else None
        self.register_buffer("weight_nested_absmax", nested.absmax if nested is not None else None)
        self.register_buffer("weight_nested_quant_map", nested.code if nested is not None else None)
        self.register_buffer(
            "weight_nested_offset", quant_state.offset if nested is not None else None
        )
        self.bias = nn.Parameter(bias, requires_grad=False) if bias is not None else None

    def quant_state(self):
        """The bitsandbytes `QuantState` of this layer, on the buffers' device."""
        from bitsandbytes.functional import QuantState

        state2 = None
        if self.weight_nested_absmax is not None:
            state2 = QuantState(
                absmax=self.weight_nested_absmax,
                code=self.weight_nested_quant_map,
                blocksize=self.nested_blocksize,
                dtype=self.nested_dtype,
            )
        return QuantState(
            absmax=self.weight_absmax,
            shape=torch.Size((self.out_features, self.in_features)),
            code=self.weight_quant_map,
            blocksize=self.blocksize,
            quant_type=self.quant_type,
            dtype=self.weight_dtype,
            offset=self.weight_nested_offset,
            state2=state2,
        )

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """`bitsandbytes.functional.dequantize_4bit` of the weight ([out, in], the quantised dtype), cast to `dtype`.

        bitsandbytes numbers its blocks over the flat weight (`quantize_4bit`, its CUDA and its
        pure-torch dequantisation), but its CPU C kernel (0.50), on its AVX-512 path, restarts the
        blocks at every row, so there it misreads a layer whose in_features is not a multiple of the blocksize (errors of the
        weights' own size, tests/models/quant/test_simd_kernels.py). Such layers on CPU are dequantised by
        bitsandbytes' pure-torch implementation instead (its `default` backend), which equals the
        C kernel bit for bit wherever the C kernel is right.
        """
        if self.weight.device.type == "cpu" and self.in_features % self.blocksize:
            from bitsandbytes.backends.default.ops import _dequantize_4bit_compute

            flat = self.weight.view(torch.uint8).reshape(-1)
            shape = (self.out_features, self.in_features)
            code = self.weight_quant_map
            w = _dequantize_4bit_compute(
                flat, self.block_absmax(), code, self.blocksize, shape, self.weight_dtype
            )
        else:
            from bitsandbytes.functional import dequantize_4bit

            w = dequantize_4bit(self.weight, self.quant_state())
        return w if dtype is None else w.to(dtype)

    def block_absmax(self) -> torch.Tensor:
        """The float32 absmax of every block (the nested quantisation undone, as bitsandbytes does)."""
        if self.weight_nested_absmax is None:
            return self.weight_absmax.to(torch.float32)
        from bitsandbytes.functional import dequantize_blockwise

        state = self.quant_state()
        return (dequantize_blockwise(state.absmax, state.state2) + state.offset).to(torch.float32)

    def fused_path(self, read, bf16: bool) -> FusedPath | str:
        """This project's fp32 kernel on CPU (with `bf16`, bitsandbytes' bf16 CPU kernel where the
        CPU has one); bitsandbytes' or this project's kernel on CUDA (module docstring)."""
        device = self.weight.device.type
        if device == "cpu":
            from nudgeability.models.quant import cpu_kernels

            if bf16 and not cpu_kernels.bnb_cpu_reason(
                self.out_features, self.in_features, self.blocksize
            ):
                return cpu_kernels.bnb_cpu_path(read("weight"), self.quant_state())
            reason = cpu_kernels.simd_reason(self.in_features, self.blocksize)
            if reason is not None:
                return reason
            return cpu_kernels.nibble_simd_path(
                self.weight,
                self.block_absmax(),
                self.weight_quant_map,
                self.blocksize,
                self.out_features,
                self.weight_dtype,
                self.exact_no_bias,
            )
        if device == "cuda":
            from nudgeability.models.quant import cuda_kernels

            return cuda_kernels.nf4_path(self)
        return f"no fused kernel on {device}"

    def exact_forward(self, x: torch.Tensor) -> torch.Tensor:
        import bitsandbytes as bnb

        if (
            x.dtype != self.weight_dtype
            or x.device.type == "cpu"
            and self.in_features % self.blocksize
            or not self.library_matmul
        ):
            # bitsandbytes' kernels compute in the activations' dtype; keep the weight's rounding
            # exact (and read blocks that straddle rows right, see `dequantize`).
            return self.product(x, self.dequantize(x.dtype), self.bias)
        return bnb.matmul_4bit(x, self.weight, quant_state=self.quant_state(), bias=self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, quant_type={self.quant_type}, "
            f"blocksize={self.blocksize}, double_quant={self.weight_nested_absmax is not None}, "
            f"bias={self.bias is not None}, compute={self.compute_path}"
        )


@dataclass(frozen=True)
class BnB4Scheme:
    """The bitsandbytes 4-bit format as a `quantization_config` describes it."""

    quant_type: str
    double_quant: bool
    skip_modules: tuple[str, ...]
    quant_method: str = "bitsandbytes"
    quant_suffixes: tuple[str, ...] = (
        ".weight.absmax",
        ".weight.quant_map",
        ".weight.nested_absmax",
        ".weight.nested_quant_map",
        ".weight.quant_state.bitsandbytes__nf4",
        ".weight.quant_state.bitsandbytes__fp4",
    )

    @classmethod
    def from_config(cls, qcfg: dict, where) -> BnB4Scheme:
        """Validate `quantization_config`; `where` (the config.json path) goes into error messages."""
        if qcfg.get("load_in_8bit") or qcfg.get("_load_in_8bit"):
            raise QuantCheckpointError(
                f"{where}: {quant_config_key('load_in_8bit')}=true (LLM.int8) is not supported; only 4-bit checkpoints"
            )
        if not (qcfg.get("load_in_4bit") or qcfg.get("_load_in_4bit")):
            raise QuantCheckpointError(
                f"{where}: {quant_config_key('load_in_4bit')} must be true for a bitsandbytes 4-bit checkpoint"
            )
        quant_type = qcfg.get("bnb_4bit_quant_type", "fp4")  # transformers' default
        if quant_type not in QUANT_TYPES:
            raise QuantCheckpointError(
                f"{where}: {quant_config_key('bnb_4bit_quant_type')}={quant_type!r} is not supported; "
                f"use one of {', '.join(QUANT_TYPES)}"
            )
        storage = qcfg.get("bnb_4bit_quant_storage", "uint8")
        if storage != "uint8":
            raise QuantCheckpointError(
                f"{where}: {quant_config_key('bnb_4bit_quant_storage')}={storage!r} is not supported; only 'uint8'"
            )
        skip = qcfg.get("llm_int8_skip_modules") or []
        return cls(
            quant_type=quant_type,
            double_quant=bool(qcfg.get("bnb_4bit_use_double_quant", False)),
            skip_modules=tuple(skip),
        )

    def quantizes(self, name: str, module: nn.Module) -> bool:
        """Whether the checkpoint stores linear `name` in 4 bits (lm_head and `llm_int8_skip_modules` do not)."""
        return quantised_linear(name, module, self.skip_modules)

    def unused_hint(self, key: str) -> str:
        kind = key.rpartition("quant_state.bitsandbytes__")[2] if "quant_state." in key else ""
        if kind and kind != self.quant_type:
            return f" (a {kind} quant state, while {quant_config_key('bnb_4bit_quant_type')}={self.quant_type!r})"
        if ".nested_" in key and not self.double_quant:
            return f" (double quantisation, while {quant_config_key('bnb_4bit_use_double_quant')} is false)"
        return ""

    def load_linear(
        self, reader: CheckpointReader, name: str, linear: nn.Linear, device, dtype: torch.dtype
    ) -> BnB4Linear:
        """Read linear `name`'s 4-bit tensors (checked) into a `BnB4Linear` on `device`."""
        from bitsandbytes.functional import QuantState

        out, inp = linear.out_features, linear.in_features
        n = out * inp
        weight = reader.require(f"{name}.weight", ((n + 1) // 2, 1), (torch.uint8,))
        state_key = f"{name}.weight.quant_state.bitsandbytes__{self.quant_type}"
        if not reader.has(state_key):
            other = [
                t for t in QUANT_TYPES if reader.has(f"{name}.weight.quant_state.bitsandbytes__{t}")
            ]
            hint = (
                f"; the file holds a {other[0]} state while {quant_config_key('bnb_4bit_quant_type')}={self.quant_type!r}"
                if other
                else ""
            )
            reader.require(state_key, why=f"bitsandbytes' packed quant state{hint}")
        if not self.double_quant and reader.has(f"{name}.weight.nested_absmax"):
            raise QuantCheckpointError(
                f"{reader.file_of(name + '.weight.nested_absmax')}: tensor {name + '.weight.nested_absmax'!r} is "
                f"double-quantised but {quant_config_key('bnb_4bit_use_double_quant')} is false; fix config.json"
            )
        parts = {"quant_state.bitsandbytes__" + self.quant_type: reader.get(state_key)}
        required = ["absmax", "quant_map"] + (
            ["nested_absmax", "nested_quant_map"] if self.double_quant else []
        )
        for part in required:
            parts[part] = reader.require(
                f"{name}.weight.{part}",
                why="double quantisation (bnb_4bit_use_double_quant) is on"
                if part.startswith("nested")
                else "",
            )
        try:
            state = QuantState.from_dict(parts, device=torch.device(device))
        except (KeyError, ValueError, AssertionError, AttributeError, UnicodeDecodeError) as exc:
            raise QuantCheckpointError(
                f"{reader.file_of(state_key)}: tensor {state_key!r} is not a valid quant state ({exc})"
            ) from exc
        if state.quant_type != self.quant_type:
            raise QuantCheckpointError(
                f"{reader.file_of(state_key)}: tensor {state_key!r} records quant_type {state.quant_type!r}, "
                f"but {quant_config_key('bnb_4bit_quant_type')}={self.quant_type!r}; config.json contradicts "
                "the checkpoint: fix it or re-download the checkpoint"
            )
        if tuple(state.shape or ()) != (out, inp):
            raise QuantCheckpointError(
                f"{reader.file_of(state_key)}: tensor {state_key!r} records shape {list(state.shape or [])}, "
                f"but the model's {name} is [{out}, {inp}]"
            )
        blocks = ceil_div(n, state.blocksize)
        _check(
            reader,
            f"{name}.weight.absmax",
            state.absmax,
            (blocks,),
            torch.uint8 if state.nested else torch.float32,
        )
        _check(reader, f"{name}.weight.quant_map", state.code, (16,), torch.float32)
        if state.nested:
            _check(
                reader,
                f"{name}.weight.nested_absmax",
                state.state2.absmax,
                (ceil_div(blocks, state.state2.blocksize),),
                torch.float32,
            )
            _check(
                reader, f"{name}.weight.nested_quant_map", state.state2.code, (256,), torch.float32
            )
        bias = (
            reader.load_float(f"{name}.bias", (out,), device, dtype)
            if linear.bias is not None
            else None
        )
        return BnB4Linear(weight.to(device), state, bias)


def _check(
    reader: CheckpointReader,
    name: str,
    tensor: torch.Tensor,
    shape: tuple[int, ...],
    dtype: torch.dtype,
) -> None:
    if tuple(tensor.shape) != shape or tensor.dtype != dtype:
        raise QuantCheckpointError(
            f"{reader.file_of(name)}: tensor {name!r} is {str(tensor.dtype).removeprefix('torch.')} "
            f"{list(tensor.shape)}, expected {str(dtype).removeprefix('torch.')} {list(shape)}"
        )
