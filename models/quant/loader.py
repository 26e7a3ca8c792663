"""Load an FP8-block, compressed-tensors pack-quantized or bitsandbytes 4-bit checkpoint directly.

`load_quantized` reads `config.json`'s `quantization_config` and the safetensors shards itself:
1. the HF model skeleton is built with every parameter on the meta device
   (`accelerate.init_empty_weights`, which lets each layer `torch.empty` its weight and moves it
   to meta at once: memory never written, so never resident; buffers such as RoPE frequencies
   are real and computed as usual);
2. each linear the config quantises is replaced by the format's module (`FP8BlockLinear`,
   `PackQuantizedLinear`, `BnB4Linear`), built straight from the checkpoint's quantised tensors;
3. the remaining parameters (embeddings, norms, lm_head, skipped linears) and persistent buffers
   are read one by one in `dtype`, then tied weights are re-tied.

Full-precision copies of quantised weights are never made. On CPU a tensor that needs no
conversion stays a view of the file's memory map, so peak memory is about the quantised size plus
the unquantised parts in `dtype`. (Do not overwrite a checkpoint in place while a model loaded from
it is alive; replacing or deleting the files is fine.)

Each quantised linear then takes its compute mode (`compute.py`): `fused` (the default) builds
the format's kernel for the device, reading what a kernel repacks with `CheckpointReader.read_copy`
so the mapped originals stay untouched; layers no kernel takes keep the exact path, named in one
warning. `compute_paths(model)` says which path each format took.

Every problem with the checkpoint raises `QuantCheckpointError` (a `ValueError`) naming the
tensor or `quantization_config` key.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from nudgeability.models.quant.bnb4_linear import BnB4Scheme
from nudgeability.models.quant.checkpoint import (
    CheckpointReader,
    QuantCheckpointError,
    quant_config_key,
)
from nudgeability.models.quant.compute import (
    DEFAULT_COMPUTE,
    QuantLinearBase,
    check_compute,
    warn_fallbacks,
)
from nudgeability.models.quant.fp8_linear import FP8Scheme
from nudgeability.models.quant.w4a16_linear import PackQuantizedScheme
from nudgeability.util.heap import release_freed_heap

log = logging.getLogger(__name__)

SCHEMES = {"fp8": FP8Scheme, "compressed-tensors": PackQuantizedScheme, "bitsandbytes": BnB4Scheme}


class QuantScheme(Protocol):
    """What each format file provides (`FP8Scheme`, `PackQuantizedScheme`, `BnB4Scheme`)."""

    quant_method: str
    quant_suffixes: tuple[str, ...]  # tensor-name suffixes only a quantised layer has

    def quantizes(self, name: str, module: nn.Module) -> bool: ...

    def unused_hint(self, key: str) -> str:
        """Why tensor `key` of a quantised layer may have gone unread ("" when nothing specific)."""
        ...

    def load_linear(
        self,
        reader: CheckpointReader,
        name: str,
        linear: nn.Linear,
        device: torch.device,
        dtype: torch.dtype,
    ) -> nn.Module: ...


def scheme_for(config: dict, where: str | Path) -> QuantScheme:
    """The validated format scheme of a parsed config.json (`where` names it in errors)."""
    qcfg = config.get("quantization_config")
    if not isinstance(qcfg, dict):
        raise QuantCheckpointError(
            f"{where}: no quantization_config; load an unquantised checkpoint with load_model"
        )
    method = qcfg.get("quant_method")
    if method not in SCHEMES:
        raise QuantCheckpointError(
            f"{where}: {quant_config_key('quant_method')}={method!r} is not supported; known: {', '.join(SCHEMES)}"
        )
    return SCHEMES[method].from_config(qcfg, where)


def load_quantized(
    directory: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    compute: str = DEFAULT_COMPUTE,
) -> nn.Module:
    """Load the quantised checkpoint in `directory` as an ordinary HF causal LM, in eval mode.

    Quantised linears keep their quantised storage on `device` and compute in the activations'
    dtype by `compute` (`exact`, `fused` or `dense`, see `compute.py`); everything else is loaded
    in `dtype`. Raises `QuantCheckpointError` for a bad checkpoint.
    """
    check_compute(compute)
    device = torch.device(device)
    directory = Path(directory)
    with CheckpointReader(directory) as reader:
        scheme = scheme_for(reader.config, reader.config_path)
        model = _skeleton(directory, dtype)
        quantised = _swap_quantised(model, scheme, reader, device, dtype)
        consumed = _load_plain(model, reader, device, dtype, quantised, scheme)
        _check_leftovers(reader, scheme, quantised, consumed)
        fallbacks = _configure(model, quantised, reader, compute, device, dtype)
    _move_buffers(model, device)
    # the repacking kernels' temporaries pile up in the heap layer after layer (util/heap.py):
    # handed back after each repacking layer (`_configure`) and once here
    release_freed_heap()
    warn_fallbacks(directory, fallbacks)
    model.eval()
    return model


def _configure(
    model: nn.Module, quantised: set[str], reader: CheckpointReader, compute: str, device, dtype
) -> dict[str, str]:
    """Give every quantised linear its compute mode; {layer: why} for those kept exact under fused."""
    fallbacks = {}
    for name in sorted(quantised):
        module = model.get_submodule(name)
        assert isinstance(module, QuantLinearBase)
        read, copies = None, []
        if device.type == "cpu":  # repack from fresh copies: the mapped tensors stay untouched

            def read(attr: str, name: str = name, copies: list = copies) -> torch.Tensor:
                copies.append(attr)
                return reader.read_copy(f"{name}.{attr}")

        why = module.configure(compute, dtype, read)
        if why is not None:
            fallbacks[name] = why
        if copies:  # a repacking kernel: free its temporaries before the next layer's pile up
            release_freed_heap()
    return fallbacks


def _skeleton(directory: Path, dtype: torch.dtype) -> nn.Module:
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    config = AutoConfig.from_pretrained(directory)
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    if (directory / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(directory)
    return model


def _swap_quantised(
    model: nn.Module, scheme: QuantScheme, reader: CheckpointReader, device, dtype
) -> set[str]:
    names = [name for name, module in model.named_modules() if scheme.quantizes(name, module)]
    for name in names:
        model.set_submodule(
            name, scheme.load_linear(reader, name, model.get_submodule(name), device, dtype)
        )
    return set(names)


def _load_plain(
    model: nn.Module,
    reader: CheckpointReader,
    device,
    dtype,
    quantised: set[str],
    scheme: QuantScheme,
) -> set[str]:
    """Fill every meta parameter, and every persistent buffer the checkpoint has outside the
    quantised layers; return the keys read."""
    tied = set(getattr(model, "all_tied_weights_keys", None) or {})
    consumed: set[str] = set()
    for name, param in list(model.named_parameters(remove_duplicate=False)):
        if not param.is_meta:
            continue
        if not reader.has(name):
            if name in tied:
                continue
            _check_not_quantised(reader, scheme, name)
            reader.require(name, why="an unquantised parameter of the model")
        owner, attr = _owner(model, name)
        owner._parameters[attr] = nn.Parameter(
            reader.load_float(name, tuple(param.shape), device, dtype), requires_grad=False
        )
        consumed.add(name)
    for module_name, module in model.named_modules():
        if module_name in quantised:
            continue
        for attr, buf in list(module._buffers.items()):
            name = f"{module_name}.{attr}" if module_name else attr
            if buf is None or attr in module._non_persistent_buffers_set or not reader.has(name):
                continue
            target = dtype if buf.is_floating_point() else buf.dtype
            module._buffers[attr] = reader.require(name, tuple(buf.shape)).to(
                device=device, dtype=target
            )
            consumed.add(name)
    model.tie_weights()
    for name, param in model.named_parameters(remove_duplicate=False):
        if param.is_meta:
            reader.require(name, why="an unquantised parameter that is not tied to another")
    return consumed


def _check_not_quantised(reader: CheckpointReader, scheme: QuantScheme, param_name: str) -> None:
    """A plain parameter missing because its layer is stored quantised: the config's skip list is wrong."""
    layer = param_name.rpartition(".")[0]
    for suffix in scheme.quant_suffixes:
        if reader.has(layer + suffix):
            raise QuantCheckpointError(
                f"{reader.file_of(layer + suffix)}: layer {layer!r} is stored quantised ({layer + suffix!r}), but "
                "quantization_config leaves it unquantised (lm_head, or a skip list: modules_to_not_convert / "
                "ignore / llm_int8_skip_modules); fix config.json"
            )


def _owner(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    module_name, _, attr = name.rpartition(".")
    return (model.get_submodule(module_name) if module_name else model), attr


def _check_leftovers(
    reader: CheckpointReader, scheme: QuantScheme, quantised: set[str], consumed: set[str]
) -> None:
    """Every tensor of a quantised layer must have been read by the declared scheme: one left over
    (zero points under `symmetric: true`, a quant state of another type) means config.json
    describes another checkpoint, and loading anyway would give wrong logits. Quantised tensors
    for a layer the config leaves unquantised are an error too; other extras only a warning."""
    unexpected = []
    for key in sorted(reader.names - consumed - reader.consumed):
        parts = key.split(".")
        layer = next(
            (".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in quantised),
            None,
        )
        if layer is not None:
            raise QuantCheckpointError(
                f"{reader.file_of(key)}: tensor {key!r} of quantised layer {layer!r} is not used by the "
                f"{scheme.quant_method} scheme that quantization_config declares"
                f"{scheme.unused_hint(key)}; config.json contradicts the checkpoint: fix it or "
                "re-download the checkpoint"
            )
        if key.endswith(scheme.quant_suffixes):
            raise QuantCheckpointError(
                f"{reader.file_of(key)}: tensor {key!r} is quantised, but quantization_config leaves its layer "
                "unquantised (lm_head, or a skip list: modules_to_not_convert / ignore / llm_int8_skip_modules); "
                "fix config.json"
            )
        unexpected.append(key)
    if unexpected:
        log.warning(
            "%s: %d checkpoint tensors are not used by the model, e.g. %s",
            reader.directory,
            len(unexpected),
            unexpected[:3],
        )


def _move_buffers(model: nn.Module, device: torch.device) -> None:
    """Non-persistent buffers (RoPE frequencies, embedding scales) were built on CPU; move them."""
    for module in model.modules():
        for attr, buf in list(module._buffers.items()):
            if buf is not None and buf.device != device:
                module._buffers[attr] = buf.to(device)
