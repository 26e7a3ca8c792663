"""Choosing a family: by name, or detected from `config.json` `model_type` and the tokenizer.

Detection order: an explicit override wins; then `model_type` (qwen3, glm4, gemma4 / gemma4_text,
including a multimodal config's `text_config`); then the tokenizer's special tokens (`<|turn>` and
`<channel|>` -> gemma4, `[gMASK]` and `<sop>` -> glm_z1, `<|im_start|>` with a single-token
`</think>` -> qwen3, `<|im_start|>` alone -> chatml). Anything else is an error that lists the
known families.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType

from nudgeability.models.families.base import Family
from nudgeability.models.families.chatml import ChatMLFamily
from nudgeability.models.families.gemma4 import Gemma4Family
from nudgeability.models.families.glm_z1 import GlmZ1Family
from nudgeability.models.families.messages import FamilyError
from nudgeability.models.families.qwen3 import Qwen3Family

FAMILIES = MappingProxyType(
    {cls.name: cls for cls in (Qwen3Family, GlmZ1Family, Gemma4Family, ChatMLFamily)}
)
KNOWN_FAMILIES = tuple(FAMILIES)
MODEL_TYPES = MappingProxyType(
    {
        "qwen3": "qwen3",
        "qwen3_moe": "qwen3",
        "glm4": "glm_z1",
        "gemma4": "gemma4",
        "gemma4_text": "gemma4",
    }
)


def get_family(name: str, tokenizer, config: dict | None = None) -> Family:
    """The family called `name` ('qwen3', 'glm_z1', 'gemma4', 'chatml') bound to `tokenizer`;
    `config` is the checkpoint's config.json dict, when known (see `Family.__init__`)."""
    if name not in FAMILIES:
        raise FamilyError(
            f"unknown model family {name!r}; known families: {', '.join(KNOWN_FAMILIES)}"
        )
    return FAMILIES[name](tokenizer, config)


def detect_family(config_or_model_dir, tokenizer, override: str | None = None) -> Family:
    """The family of a checkpoint, bound to `tokenizer`.

    `config_or_model_dir` is a checkpoint directory (its config.json is read), a config dict, a
    transformers config, a model (its `.config` is used) or None (tokenizer only). `override`, when
    given, names the family and skips detection.
    """
    config = _read_config(config_or_model_dir)
    if override is not None:
        return get_family(override, tokenizer, config)
    model_types = _model_types(config)
    for model_type in model_types:
        if model_type in MODEL_TYPES:
            return get_family(MODEL_TYPES[model_type], tokenizer, config)
    name = _family_from_tokens(tokenizer)
    if name is None:
        shown = ", ".join(model_types) or "none"
        raise FamilyError(
            f"cannot tell the model family (model_type: {shown}; no known special tokens in the tokenizer); "
            f"known families: {', '.join(KNOWN_FAMILIES)}; pass one explicitly as the family override"
        )
    return get_family(name, tokenizer, config)


def _read_config(source) -> dict | None:
    """The config as a dict (None when there is none); see `detect_family` for the sources."""
    if source is None:
        return None
    if isinstance(source, (str, Path)):
        path = Path(source)
        path = path / "config.json" if path.is_dir() else path
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise FamilyError(
                f"{path}: cannot read a config.json to detect the model family ({exc})"
            ) from exc
    elif isinstance(source, dict):
        config = source
    else:
        config = getattr(source, "config", source)
        config = config.to_dict() if hasattr(config, "to_dict") else vars(config)
    return config


def _model_types(config: dict | None) -> list[str]:
    if not config:
        return []
    types = [config.get("model_type")]
    text_config = config.get("text_config")
    if isinstance(text_config, dict):
        types.append(text_config.get("model_type"))
    return [t for t in types if isinstance(t, str)]


def _family_from_tokens(tokenizer) -> str | None:
    vocab = tokenizer.get_vocab()
    if "<|turn>" in vocab and "<channel|>" in vocab:
        return "gemma4"
    if "[gMASK]" in vocab and "<sop>" in vocab:
        return "glm_z1"
    if "<|im_start|>" in vocab:
        return "qwen3" if "</think>" in vocab else "chatml"
    return None
