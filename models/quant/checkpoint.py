"""A safetensors checkpoint directory: reading its tensors lazily, and writing one.

A directory holds `config.json` and either `model.safetensors` or shards listed in
`model.safetensors.index.json` (the hub layout). `CheckpointReader` opens every shard with
`safetensors.safe_open`, whose tensors are views of the file's memory map: nothing is read until
it is used, and a tensor kept as it is costs no second copy. `save_checkpoint` writes the same
layout, sharded when asked, for the quantisation writers.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import struct
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from nudgeability.models.errors import ModelLoadError

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


class QuantCheckpointError(ModelLoadError):
    """A quantised checkpoint that cannot be loaded as it is.

    The message names the file and the tensor or `quantization_config` key at fault, and what to do.
    """


def quantised_linear(name: str, module: torch.nn.Module, skip_modules: tuple[str, ...]) -> bool:
    """Whether a format that quantises every linear but lm_head and a skip list (FP8,
    bitsandbytes) stores linear `name` quantised; the skip list is matched as transformers does."""
    from transformers.quantizers.quantizers_utils import should_convert_module

    return (
        isinstance(module, torch.nn.Linear)
        and name.rsplit(".", 1)[-1] != "lm_head"
        and should_convert_module(name, list(skip_modules) or None)
    )


class CheckpointReader:
    """Lazy access to the tensors of a checkpoint directory (close it, or use it as a context manager)."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.config_path = self.directory / "config.json"
        if not self.config_path.is_file():
            raise QuantCheckpointError(
                f"{self.directory}: not a checkpoint directory (no config.json)"
            )
        from nudgeability.models.preflight import read_config

        self.config: dict = read_config(self.directory)
        self._stack = contextlib.ExitStack()
        self._handles: dict[Path, object] = {}
        self._where: dict[str, Path] = {}
        self.consumed: set[str] = set()  # every tensor read: the loader refuses any left unread
        for shard in self._shards():
            try:
                handle = self._stack.enter_context(
                    safe_open(str(shard), framework="pt", device="cpu")
                )
            except (SafetensorError, OSError) as exc:
                self._stack.close()
                raise QuantCheckpointError(
                    f"{shard}: not a readable safetensors file ({exc}); it is truncated or "
                    "damaged: download it again"
                ) from None
            self._handles[shard] = handle
            for name in handle.keys():
                self._where[name] = shard

    def _shards(self) -> list[Path]:
        index = self.directory / INDEX_NAME
        if index.is_file():
            weight_map = json.loads(index.read_text()).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise QuantCheckpointError(
                    f"{index}: no 'weight_map'; re-download the checkpoint's index file"
                )
            shards = sorted({self.directory / f for f in weight_map.values()})
            missing = [s for s in shards if not s.is_file()]
            if missing:
                raise QuantCheckpointError(
                    f"{missing[0]}: shard listed in {INDEX_NAME} is missing; re-download it"
                )
            return shards
        single = self.directory / SINGLE_NAME
        if single.is_file():
            return [single]
        found = sorted(self.directory.glob("*.safetensors"))
        if not found:
            raise QuantCheckpointError(
                f"{self.directory}: no {SINGLE_NAME}, no {INDEX_NAME} and no *.safetensors file"
            )
        return found

    def __enter__(self) -> CheckpointReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the shard files. Tensors already taken stay valid (they keep their mapping alive)."""
        self._stack.close()

    @property
    def names(self) -> set[str]:
        return set(self._where)

    def has(self, name: str) -> bool:
        return name in self._where

    def file_of(self, name: str) -> Path:
        return self._where[name]

    def get(self, name: str) -> torch.Tensor:
        """The tensor `name`, backed by the file's memory map (read lazily, never modified)."""
        if name not in self._where:
            raise QuantCheckpointError(
                f"{self.directory}: tensor {name!r} is missing from the checkpoint"
            )
        self.consumed.add(name)
        return self._handles[self._where[name]].get_tensor(name)

    def read_copy(self, name: str) -> torch.Tensor:
        """The tensor `name` read into new memory with `os.pread`, not through the memory map.

        For tensors that are converted at load and then dropped (a kernel's repacking): the
        file's pages are then never mapped into this process, so they do not count in its
        resident memory, while the layer keeps the mapped view for `dequantize()`.
        """
        shard = self.file_of(name) if name in self._where else None
        if shard is None:
            return self.get(name)  # raises the usual error
        header, data_start = _safetensors_header(shard)
        entry = header[name]
        begin, end = entry["data_offsets"]
        fd = os.open(shard, os.O_RDONLY)
        try:
            data = bytearray(end - begin)
            view, done = memoryview(data), 0
            while done < len(data):
                got = os.preadv(fd, [view[done:]], data_start + begin + done)
                if got <= 0:
                    raise QuantCheckpointError(
                        f"{shard}: tensor {name!r} is cut short; re-download it"
                    )
                done += got
        finally:
            os.close(fd)
        self.consumed.add(name)
        dtype = _SAFETENSORS_DTYPES[entry["dtype"]]
        if not data:
            return torch.empty(entry["shape"], dtype=dtype)
        return torch.frombuffer(data, dtype=dtype).reshape(entry["shape"])

    def require(
        self,
        name: str,
        shape: tuple[int, ...] | None = None,
        dtypes: tuple[torch.dtype, ...] | None = None,
        why: str = "",
    ) -> torch.Tensor:
        """The tensor `name`, checked to have `shape` and one of `dtypes`; a `QuantCheckpointError` otherwise."""
        if name not in self._where:
            hint = f" ({why})" if why else ""
            raise QuantCheckpointError(
                f"{self.directory}: tensor {name!r} is missing{hint}; the checkpoint is incomplete or was "
                f"written for another layout — re-download or re-write it"
            )
        tensor = self.get(name)
        if shape is not None and tuple(tensor.shape) != tuple(shape):
            raise QuantCheckpointError(
                f"{self.file_of(name)}: tensor {name!r} has shape {list(tensor.shape)}, expected {list(shape)}"
                + (f" ({why})" if why else "")
            )
        if dtypes is not None and tensor.dtype not in dtypes:
            allowed = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
            raise QuantCheckpointError(
                f"{self.file_of(name)}: tensor {name!r} has dtype {str(tensor.dtype).removeprefix('torch.')}, "
                f"expected {allowed}"
            )
        return tensor

    def load_float(
        self, name: str, shape: tuple[int, ...], device: torch.device | str, dtype: torch.dtype
    ) -> torch.Tensor:
        """An unquantised tensor (bias, norm, embedding), checked and converted to `dtype` on `device`.

        When no conversion is needed on CPU the result stays a view of the memory map (no copy).
        """
        tensor = self.require(name)
        if tensor.dtype not in _PLAIN_FLOATS:
            raise QuantCheckpointError(
                f"{self.file_of(name)}: tensor {name!r} is stored as {str(tensor.dtype).removeprefix('torch.')}, "
                "but quantization_config leaves it unquantised (lm_head, embeddings, norms, or a skip list: "
                "modules_to_not_convert / ignore / llm_int8_skip_modules); fix config.json"
            )
        return self.require(name, shape).to(device=device, dtype=dtype)


_PLAIN_FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
_SAFETENSORS_DTYPES = {
    "F8_E4M3": torch.float8_e4m3fn,
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "I16": torch.int16,
    "I32": torch.int32,
    "I64": torch.int64,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
}


def _safetensors_header(shard: Path) -> tuple[dict, int]:
    """(the JSON header of a safetensors file, the offset where its data starts)."""
    with open(shard, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        return json.loads(handle.read(length)), 8 + length


def quant_config_key(key: str) -> str:
    """How error messages name a `quantization_config` field."""
    return f"quantization_config.{key}"


def save_checkpoint(
    out_dir: str | Path,
    tensors: dict[str, torch.Tensor],
    model,
    quantization_config: dict | None,
    tokenizer=None,
    max_shard_bytes: int | None = None,
) -> Path:
    """Write `tensors` and `model`'s config (with `quantization_config`) as a hub-style checkpoint.

    Tensors are written in order; with `max_shard_bytes` they are split into
    `model-0000i-of-0000n.safetensors` shards plus `model.safetensors.index.json`. The generation
    config and `tokenizer` (when given) are saved too, so the directory loads like a hub download.
    Returns `out_dir`.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    shards = _split(tensors, max_shard_bytes)
    if len(shards) == 1:
        save_file(shards[0], str(out / SINGLE_NAME), metadata={"format": "pt"})
    else:
        weight_map = {}
        total = 0
        for i, shard in enumerate(shards, start=1):
            name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
            save_file(shard, str(out / name), metadata={"format": "pt"})
            for key, value in shard.items():
                weight_map[key] = name
                total += value.numel() * value.element_size()
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / INDEX_NAME).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    config = copy.deepcopy(model.config)
    if quantization_config is not None:
        config.quantization_config = quantization_config
    elif hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(out)
    generation_config = getattr(model, "generation_config", None)
    if generation_config is not None:
        generation_config.save_pretrained(out)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out


def _split(
    tensors: dict[str, torch.Tensor], max_shard_bytes: int | None
) -> list[dict[str, torch.Tensor]]:
    if not max_shard_bytes:
        return [tensors]
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for key, value in tensors.items():
        nbytes = value.numel() * value.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][key] = value
        size += nbytes
    return shards


def untied_state(model) -> dict[str, torch.Tensor]:
    """`model.state_dict()` with tied duplicates dropped (the first name of each shared storage wins).

    safetensors refuses shared tensors; the loader re-ties them from the config, as transformers does.
    """
    seen: set[tuple[int, int, tuple[int, ...]]] = set()
    state = {}
    for key, value in model.state_dict().items():
        ident = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape))
        if ident in seen:
            continue
        seen.add(ident)
        state[key] = value
    return state


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for positive integers."""
    return -(-a // b)
