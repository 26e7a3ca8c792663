"""Write small quantised checkpoints from an HF model, in the three formats `load_quantized` reads.

Each writer quantises the same linears the real checkpoints do (every `nn.Linear` except
`lm_head` and the skip list; embeddings and norms stay in the model's dtype), saves the tensors as
safetensors (sharded with `max_shard_bytes`), the config with its `quantization_config`, the
generation config and, when given, the tokenizer — so the directory loads like a hub download,
with `load_quantized`, `load_model` or (where it can) transformers itself.

- FP8 follows the documented layout (see `fp8_linear`); there is no library writer for it.
- W4A16 goes through compressed-tensors' own path: `apply_quantization_config`, per-group
  min/max through `calculate_qparams`, `ModelCompressor.compress_model`, `update_config`.
- BNB4 uses `bitsandbytes.functional.quantize_4bit` and `QuantState.as_dict(packed=True)`,
  exactly what `Linear4bit`'s state dict holds.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from nudgeability.models.quant.bnb4_linear import BnB4Scheme
from nudgeability.models.quant.checkpoint import save_checkpoint, untied_state
from nudgeability.models.quant.fp8_linear import FP8Scheme, quantize_fp8_block


def write_fp8(
    model: nn.Module,
    out_dir: str | Path,
    block_size: tuple[int, int] = (128, 128),
    scale_dtype: torch.dtype = torch.bfloat16,
    tokenizer=None,
    modules_to_not_convert: tuple[str, ...] = (),
    max_shard_bytes: int | None = None,
) -> Path:
    """Write `model` as an FP8 fine-grained block checkpoint (`weight_block_size` = `block_size`)."""
    scheme = FP8Scheme(
        block_size=tuple(block_size), modules_to_not_convert=tuple(modules_to_not_convert)
    )
    state = untied_state(model)
    for name, module in model.named_modules():
        if scheme.quantizes(name, module):
            weight, scale_inv = quantize_fp8_block(module.weight, scheme.block_size, scale_dtype)
            state[f"{name}.weight"] = weight
            state[f"{name}.weight_scale_inv"] = scale_inv
    qcfg = {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": list(block_size),
    }
    if modules_to_not_convert:
        qcfg["modules_to_not_convert"] = list(modules_to_not_convert)
    return save_checkpoint(out_dir, state, model, qcfg, tokenizer, max_shard_bytes)


def write_w4a16(
    model: nn.Module,
    out_dir: str | Path,
    group_size: int | None = 32,
    symmetric: bool = True,
    num_bits: int = 4,
    tokenizer=None,
    ignore: tuple[str, ...] = ("lm_head",),
    max_shard_bytes: int | None = None,
) -> Path:
    """Write `model` as a compressed-tensors pack-quantized checkpoint (int weights, per-group scales).

    `group_size=None` writes one scale per output row (the `channel` strategy). Linears whose input
    size `group_size` does not divide are added to `ignore` (compressed-tensors cannot group them),
    as are those named in `ignore`. `model` itself is not modified.
    """
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationConfig,
        QuantizationScheme,
        apply_quantization_config,
    )
    from compressed_tensors.quantization.utils import calculate_qparams

    skip = list(ignore)
    skip += [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear)
        and group_size
        and module.in_features % group_size
        and name not in skip
    ]
    strategy = "group" if group_size else "channel"
    args = QuantizationArgs(
        num_bits=num_bits, type="int", symmetric=symmetric, strategy=strategy, group_size=group_size
    )
    qcfg = QuantizationConfig(
        config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=args)},
        ignore=skip,
        format="pack-quantized",
        quantization_status="frozen",
    )
    work = copy.deepcopy(model)
    apply_quantization_config(work, qcfg)
    with torch.no_grad():
        for module in work.modules():
            scheme = getattr(module, "quantization_scheme", None)
            if scheme is None or not hasattr(module, "weight_scale"):
                continue
            w = module.weight.detach()
            size = group_size or w.shape[-1]
            groups = w.unflatten(-1, (w.shape[-1] // size, size))
            scale, zero_point = calculate_qparams(groups.amin(-1), groups.amax(-1), scheme.weights)
            module.weight_scale.copy_(scale)
            if not symmetric:
                module.weight_zero_point.copy_(zero_point)
    compressor = ModelCompressor.from_pretrained_model(work, quantization_format="pack-quantized")
    compressor.compress_model(work)
    out = save_checkpoint(out_dir, untied_state(work), model, None, tokenizer, max_shard_bytes)
    compressor.update_config(str(out))
    return out


def write_bnb4(
    model: nn.Module,
    out_dir: str | Path,
    double_quant: bool = True,
    quant_type: str = "nf4",
    blocksize: int = 64,
    tokenizer=None,
    skip_modules: tuple[str, ...] = (),
    max_shard_bytes: int | None = None,
) -> Path:
    """Write `model` as a bitsandbytes 4-bit checkpoint (nf4 or fp4, with or without double quantisation)."""
    from bitsandbytes.functional import quantize_4bit
    from transformers import BitsAndBytesConfig

    scheme = BnB4Scheme(
        quant_type=quant_type, double_quant=double_quant, skip_modules=tuple(skip_modules)
    )
    state = untied_state(model)
    dtype = None
    for name, module in model.named_modules():
        if scheme.quantizes(name, module):
            weight = module.weight.detach().contiguous()
            dtype = weight.dtype
            packed, quant_state = quantize_4bit(
                weight, blocksize=blocksize, compress_statistics=double_quant, quant_type=quant_type
            )
            state[f"{name}.weight"] = packed
            for key, value in quant_state.as_dict(packed=True).items():
                state[f"{name}.weight.{key}"] = value
    qcfg = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=quant_type,
        bnb_4bit_use_double_quant=double_quant,
        bnb_4bit_compute_dtype=dtype or torch.float32,
        bnb_4bit_quant_storage=torch.uint8,
        llm_int8_skip_modules=list(skip_modules) or None,
    ).to_dict()
    qcfg["quant_method"] = str(getattr(qcfg["quant_method"], "value", qcfg["quant_method"]))
    return save_checkpoint(out_dir, state, model, qcfg, tokenizer, max_shard_bytes)
