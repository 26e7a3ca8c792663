"""Checks of a checkpoint directory before anything is loaded from it.

Each problem a user can fix becomes one `ModelLoadError` line naming the file and what is wrong,
instead of a library traceback or, worse, a model that loads with some weights left random:

- `config.json` that is not JSON, not an object, or whose `quantization_config` is not an object;
- no tokenizer files (without them a tokenizer cannot be built, whatever the library then says);
- a safetensors file that is truncated or damaged (its header or its size);
- `num_hidden_layers` that disagrees with `layer_types` or with the layers the tensors hold.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

from nudgeability.models.errors import ModelLoadError
from nudgeability.util.json_errors import json_error

# At least one of these is needed to build a tokenizer (tokenizer_config.json alone only points).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.tiktoken",
)
_LAYER = re.compile(r"^(?P<prefix>(?:[\w]+\.)*?)layers\.(?P<index>\d+)\.")
_NOT_THE_DECODER = ("vision", "visual", "audio", "encoder", "mtp")


def read_config(directory: Path) -> dict:
    """config.json of a checkpoint directory, checked to be an object with an object (or no)
    `quantization_config`."""
    path = Path(directory) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelLoadError(
            f"{path}:{exc.lineno}: {json_error(exc)}; the file may be truncated: "
            "copy it again from the original checkpoint"
        ) from None
    except UnicodeDecodeError as exc:
        raise ModelLoadError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    if not isinstance(config, dict):
        raise ModelLoadError(
            f"{path}: must hold a JSON object of model settings, found a JSON "
            f"{type(config).__name__}"
        )
    quant = config.get("quantization_config")
    if quant is not None and not isinstance(quant, dict):
        raise ModelLoadError(
            f"{path}: field quantization_config must be a JSON object, found a JSON "
            f"{type(quant).__name__}"
        )
    return config


def check_tokenizer_files(directory: Path) -> None:
    directory = Path(directory)
    if any((directory / name).is_file() for name in TOKENIZER_FILES):
        return
    if any(directory.glob("*.tiktoken")):
        return
    raise ModelLoadError(
        f"{directory}: no tokenizer files (none of {', '.join(TOKENIZER_FILES[:4])}, ...); "
        "copy them from the original checkpoint into this directory"
    )


def safetensors_names(directory: Path) -> dict[str, Path]:
    """{tensor name: file} over the directory's safetensors files, each checked to be whole."""
    from safetensors import SafetensorError, safe_open

    names: dict[str, Path] = {}
    for path in sorted(Path(directory).glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt", device="cpu") as handle:
                names.update(dict.fromkeys(handle.keys(), path))
        except (SafetensorError, OSError) as exc:
            raise ModelLoadError(
                f"{path}: not a readable safetensors file ({exc}); it is truncated or damaged: "
                "download it again"
            ) from None
    return names


def check_layer_counts(config_path: Path, config: dict, tensor_names) -> None:
    """`num_hidden_layers` against `layer_types` and against the decoder layers in the tensors."""
    settings = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    layers = settings.get("num_hidden_layers", config.get("num_hidden_layers"))
    if not isinstance(layers, int) or isinstance(layers, bool):
        return
    types = settings.get("layer_types")
    if isinstance(types, list) and len(types) != layers:
        raise ModelLoadError(
            f"{config_path}: num_hidden_layers is {layers} but layer_types lists {len(types)} "
            "layers; make them agree (the checkpoint's original config.json has both right)"
        )
    found: dict[str, set[int]] = defaultdict(set)
    for name in tensor_names:
        match = _LAYER.match(name)
        if match and not any(word in match["prefix"] for word in _NOT_THE_DECODER):
            found[match["prefix"]].add(int(match["index"]))
    if len(found) != 1:
        return  # no or several layer stacks: nothing to compare with certainty
    ((prefix, indices),) = found.items()
    extra = settings.get("num_nextn_predict_layers") or 0  # multi-token-prediction layers
    if len(indices) not in (layers, layers + extra):
        raise ModelLoadError(
            f"{config_path}: num_hidden_layers is {layers} but the checkpoint's tensors hold "
            f"{len(indices)} decoder layers ({prefix}layers.N); the config belongs to another "
            "checkpoint: use the config.json that came with these weights"
        )


def check_checkpoint_directory(directory: Path) -> dict:
    """Every check above on a checkpoint directory; returns its config."""
    directory = Path(directory)
    config = read_config(directory)
    check_tokenizer_files(directory)
    names = safetensors_names(directory)
    check_layer_counts(directory / "config.json", config, names)
    return config
