"""Quantised checkpoints of the tiny models, and the libraries' own dequantisation as the reference.

Test modules cannot import this file (importlib mode): they get the checkpoints through the
`checkpoint` fixture (by format id, see `FORMATS`) and the helper functions through the `qt`
fixture (`qt.reference_weights(dir)`, `qt.reference_model(...)`, ...).

Each (architecture, format) checkpoint is written once per session. The reference weights are
computed from the files with the libraries' code only (safetensors `load_file`, compressed-tensors'
`PackedQuantizationCompressor.decompress`, bitsandbytes' `QuantState.from_dict` +
`dequantize_4bit`; FP8 by the documented formula with explicit indices), never with
`nudgeability.models.quant`.
"""

from __future__ import annotations

import copy
import json
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from helpers.engine_reference import hf_greedy
from safetensors.torch import load_file

from nudgeability.models.quant import (
    BnB4Linear,
    FP8BlockLinear,
    PackQuantizedLinear,
    load_quantized,
    write_bnb4,
    write_fp8,
    write_w4a16,
)
from nudgeability.models.testing.tiny import tiny_model

ARCHS = ("qwen3", "gemma4", "glm4")
QUANT_CLASSES = (FP8BlockLinear, PackQuantizedLinear, BnB4Linear)


@dataclass(frozen=True)
class Format:
    write: Callable
    kwargs: dict = field(default_factory=dict)
    source_dtype: torch.dtype = torch.float32  # the real checkpoints are written from bf16 models


FORMATS = {
    # FP8: 128-blocks are partial on 64/128-wide tiny layers; 32x32 and 48x40 give multi-block grids.
    "fp8_b128_bf16": Format(write_fp8, dict(block_size=(128, 128), scale_dtype=torch.bfloat16)),
    "fp8_b32_f16": Format(write_fp8, dict(block_size=(32, 32), scale_dtype=torch.float16)),
    "fp8_b48x40_f32": Format(write_fp8, dict(block_size=(48, 40), scale_dtype=torch.float32)),
    "w4a16_g32_sym": Format(write_w4a16, dict(group_size=32, symmetric=True)),
    "w4a16_g32_asym": Format(write_w4a16, dict(group_size=32, symmetric=False)),
    "w4a16_g128_sym": Format(write_w4a16, dict(group_size=128, symmetric=True)),
    "w8a16_g32_asym": Format(write_w4a16, dict(group_size=32, symmetric=False, num_bits=8)),
    "bnb_nf4_dq": Format(write_bnb4, dict(quant_type="nf4", double_quant=True)),
    "bnb_nf4": Format(write_bnb4, dict(quant_type="nf4", double_quant=False)),
    "bnb_fp4_dq": Format(write_bnb4, dict(quant_type="fp4", double_quant=True)),
    "w4a16_channel_asym": Format(write_w4a16, dict(group_size=None, symmetric=False)),
    # Written from bf16 models, like the real checkpoints: bf16 scales / bf16 quant-state dtype.
    "fp8_b128_from_bf16": Format(write_fp8, dict(block_size=(128, 128)), torch.bfloat16),
    "w4a16_g32_asym_from_bf16": Format(
        write_w4a16, dict(group_size=32, symmetric=False), torch.bfloat16
    ),
    "bnb_nf4_dq_from_bf16": Format(
        write_bnb4, dict(quant_type="nf4", double_quant=True), torch.bfloat16
    ),
}
# One representative of each format family, for the more expensive checks.
MAIN_FORMATS = ("fp8_b32_f16", "w4a16_g32_asym", "bnb_nf4_dq")


@dataclass
class Case:
    arch: str
    fmt: str
    directory: Path
    model: torch.nn.Module  # the model the checkpoint was written from


@pytest.fixture(autouse=True)
def _one_thread():
    """Run these tests on one thread, restoring the setting afterwards.

    bitsandbytes' CPU kernels open an OpenMP parallel region on every call (sharing torch's
    thread setting); on a shared 2-core machine each region waits for a descheduled thread,
    ~10 ms per tiny dequantisation instead of ~0.04 ms. Results do not depend on it.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    """`checkpoint(arch, fmt) -> Case`: the tiny `arch` model written in format `fmt` (cached)."""
    cache: dict[tuple[str, str], Case] = {}

    def get(arch: str, fmt: str) -> Case:
        if (arch, fmt) not in cache:
            model = tiny_model(arch, dtype=FORMATS[fmt].source_dtype)
            directory = tmp_path_factory.mktemp(f"{arch}-{fmt}")
            FORMATS[fmt].write(model, directory, **FORMATS[fmt].kwargs)
            cache[arch, fmt] = Case(arch, fmt, directory, model)
        return cache[arch, fmt]

    return get


def read_tensors(directory: Path) -> dict[str, torch.Tensor]:
    tensors = {}
    for file in sorted(Path(directory).glob("*.safetensors")):
        tensors.update(load_file(str(file)))
    return tensors


def _layer_tensors(
    tensors: dict[str, torch.Tensor], marker: str, strip: str, keep: str
) -> dict[str, dict[str, torch.Tensor]]:
    """{layer name: its tensors} for each layer that stores a `name + marker` tensor: the keys that
    start with `name + keep`, less their `name + strip` (the local names a library's reader takes)."""
    out = {}
    for key in tensors:
        if key.endswith(marker):
            name = key.removesuffix(marker)
            out[name] = {
                k.removeprefix(name + strip): v
                for k, v in tensors.items()
                if k.startswith(name + keep)
            }
    return out


def reference_weights(directory: Path) -> dict[str, torch.Tensor]:
    """{linear name: dequantised weight} for every quantised linear, by the libraries' own code."""
    qcfg = json.loads((Path(directory) / "config.json").read_text())["quantization_config"]
    tensors = read_tensors(directory)
    method = qcfg["quant_method"]
    if method == "fp8":
        b0, b1 = qcfg["weight_block_size"]
        out = {}
        for key in tensors:
            if key.endswith(".weight_scale_inv"):
                name = key.removesuffix(".weight_scale_inv")
                w, s = tensors[name + ".weight"], tensors[key]
                rows = torch.arange(w.shape[0]) // b0
                cols = torch.arange(w.shape[1]) // b1
                out[name] = w.to(torch.float32) * s.to(torch.float32)[rows][:, cols]
        return out
    if method == "compressed-tensors":
        from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
        from compressed_tensors.quantization import QuantizationScheme

        (group,) = qcfg["config_groups"].values()
        scheme = QuantizationScheme.model_validate(group)
        out = {}
        for name, local in _layer_tensors(tensors, ".weight_packed", ".", ".weight").items():
            zp = local.get("weight_zero_point")
            if zp is not None and zp.shape[0] == 1:
                # Same values, other strides: compressed-tensors 0.20.1's 4-bit unpack views the
                # transposed zero points as bytes, which fails for a single packed row (<= 8
                # output rows, e.g. Gemma 4's per-layer gate) — a stride quirk of the library.
                local["weight_zero_point"] = zp.as_strided(zp.shape, (1, 1))
            out[name] = PackedQuantizationCompressor.decompress(local, scheme)["weight"]
        return out
    if method == "bitsandbytes":
        from bitsandbytes.functional import QuantState, dequantize_4bit

        out = {}
        for name, parts in _layer_tensors(
            tensors, ".weight.quant_map", ".weight.", ".weight."
        ).items():
            state = QuantState.from_dict(parts, device=torch.device("cpu"))
            out[name] = dequantize_4bit(tensors[name + ".weight"], state)
        return out
    raise AssertionError(method)


def reference_model(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    """An fp32 copy of `model` whose quantised linears hold the reference-dequantised weights.

    Built fresh in fp32 and filled from the state dict, so non-persistent buffers (RoPE
    frequencies) are computed in fp32 as a fresh load computes them, not rounded through bf16.
    """
    ref = type(model)(copy.deepcopy(model.config))
    ref.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    with torch.no_grad():
        for name, w in weights.items():
            ref.get_submodule(name).weight.copy_(w.to(torch.float32))
    return ref.eval()


def quantised_modules(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    return {name: m for name, m in model.named_modules() if isinstance(m, QUANT_CLASSES)}


def greedy(model, ids: torch.Tensor, steps: int) -> list[int]:
    """HF `generate(do_sample=False)`, exactly `steps` new tokens (EOS suppressed alike in both models)."""
    return hf_greedy(model, ids[0].tolist(), steps, min_new_tokens=steps).tokens


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| relative to max |b|."""
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def load(case: Case, compute: str = "exact") -> torch.nn.Module:
    """The checkpoint loaded with `compute` (exact by default: the tests of the formats' layouts
    compare bit for bit; tests/models/quant/test_fused.py covers the fused kernels)."""
    return load_quantized(case.directory, compute=compute)


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """A word-level tokenizer built offline, so tiny checkpoints load through `load_model` too."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, **{f"w{i}": i for i in range(3, 320)}}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<pad>")),
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
    )


@pytest.fixture(scope="session")
def qt():
    """The helper functions of this file, as a namespace."""
    helpers = (
        read_tensors,
        reference_weights,
        reference_model,
        quantised_modules,
        greedy,
        rel_diff,
    )
    return types.SimpleNamespace(
        **{f.__name__: f for f in (*helpers, load, load_quantized)},
        QUANT_CLASSES=QUANT_CLASSES,
        FORMATS=FORMATS,
    )
