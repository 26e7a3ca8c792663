"""Load a causal LM and its tokenizer from a local directory, an HF-cache repo id or a GGUF file.

Quantised checkpoints (FP8 blocks, compressed-tensors pack-quantized, bitsandbytes 4-bit) are
recognised from `config.json` `quantization_config` and loaded by `nudgeability.models.quant`
without materialising full-precision weights.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from nudgeability.models import smollm2
from nudgeability.models.errors import ModelLoadError


@dataclass
class ModelSource:
    """Where a loaded model came from: what the run manifest records and hashes."""

    spec: str
    directory: Path
    files: list[Path] = field(default_factory=list)
    gguf: Path | None = None
    quant_method: str | None = None
    # a quantised model as loaded: {"mode": exact|fused|dense, "paths": {format: {path: layers}}}
    quant_compute: dict | None = None


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    source: ModelSource


def resolve(spec: str | Path) -> ModelSource:
    """Turn a model spec into a local checkpoint directory.

    Accepted: 'smollm2' (the embedded model), a checkpoint directory, a `.gguf` file (converted
    once and cached), or a hub repo id that is already in the local HF cache (never downloaded).
    """
    text = str(spec)
    if text == smollm2.ALIAS:
        gguf = smollm2.find_gguf()
        return _source(text, _converted(gguf), gguf=gguf)
    path = Path(text).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return _source(text, _converted(path), gguf=path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{path}: not a checkpoint directory (no config.json)")
        return _source(text, path)
    if path.exists():
        raise ModelLoadError(f"{path}: expected a checkpoint directory or a .gguf file")
    missing = ModelLoadError(f"{path}: the path does not exist; check the --model argument")
    if path.suffix in _FILE_SUFFIXES:
        raise missing
    if text.count("/") == 1 and not text.startswith((".", "/", "~")):
        if not Path(text.split("/", 1)[0]).expanduser().is_dir():
            return _source(text, _from_hf_cache(text))
        try:  # 'org' is also a local directory: a hub id only if it is in the cache
            return _source(text, _from_hf_cache(text))
        except ModelLoadError:
            raise missing from None
    raise ModelLoadError(
        f"{text}: no such file or directory, and not a hub repo id of the form 'org/name'"
    )


_FILE_SUFFIXES = (".gguf", ".safetensors", ".bin", ".json", ".pt", ".pth")


def _converted(gguf: Path) -> Path:
    """The cached safetensors conversion of a GGUF file; a file that cannot be read is named."""
    import struct

    try:
        return smollm2.converted_dir(gguf)
    except (ValueError, struct.error, EOFError, KeyError, IndexError) as exc:
        raise ModelLoadError(
            f"{gguf}: cannot read this GGUF file ({type(exc).__name__}: {exc}); if it is "
            "truncated or damaged, download it again"
        ) from None


def _from_hf_cache(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, OSError) as exc:
        raise ModelLoadError(
            f"{repo_id}: not in the local Hugging Face cache, and nudgeability never downloads. "
            f"Download it where you have network access (huggingface-cli download {repo_id}) or pass a directory."
        ) from exc


def _source(spec: str, directory: Path, gguf: Path | None = None) -> ModelSource:
    from nudgeability.models.preflight import read_config

    files = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))
    quant = None
    qcfg = read_config(directory).get("quantization_config")
    if qcfg:
        quant = qcfg.get("quant_method")
    return ModelSource(spec=spec, directory=directory, files=files, gguf=gguf, quant_method=quant)


def load_model(
    spec: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    quant_compute: str = "fused",
) -> LoadedModel:
    """Load `spec` (see `resolve`) onto `device` in `dtype`, in eval mode, with its tokenizer.

    A quantised checkpoint's linears compute by `quant_compute` (models/quant/compute.py); the
    mode and the path each format took are recorded in `source.quant_compute`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from nudgeability.models.preflight import check_checkpoint_directory

    source = resolve(spec)
    check_checkpoint_directory(source.directory)
    tokenizer = AutoTokenizer.from_pretrained(source.directory)
    if source.quant_method is not None:
        # The supported methods are `quant.loader.SCHEMES`; an unknown one raises
        # QuantCheckpointError (a ModelLoadError) before any weight is read.
        from nudgeability.models.quant import compute_paths, load_quantized

        model = load_quantized(source.directory, device=device, dtype=dtype, compute=quant_compute)
        source.quant_compute = {"mode": quant_compute, "paths": compute_paths(model)}
    else:
        model = AutoModelForCausalLM.from_pretrained(source.directory, dtype=dtype)
        model.to(device)
    model.eval()
    return LoadedModel(model=model, tokenizer=tokenizer, source=source)


def gpu_compute_dtype(source: ModelSource) -> str:
    """The dtype a GPU computes `source`'s checkpoint in when none is asked for: float16 where
    its config states float16, else bfloat16: a bf16 checkpoint's own, the activations' dtype of
    an FP8, W4A16 or BNB4 checkpoint (whose fast kernels, `_scaled_mm` and tinygemm, take bf16),
    and a GGUF file's or an fp32 checkpoint's (float32 only when asked: it would hold twice the
    memory for the same weights and skip the tensor cores)."""
    from nudgeability.models.preflight import read_config

    config = read_config(source.directory)
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    stated = next(
        (c.get(k) for c in (config, text) for k in ("dtype", "torch_dtype") if c.get(k)), None
    )
    return "float16" if stated == "float16" else "bfloat16"
