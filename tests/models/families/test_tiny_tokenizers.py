"""The tiny tokenizers: small, deterministic, carrying each family's special tokens with ids that
agree with the tiny model they are paired with."""

from __future__ import annotations

import pytest
import torch

from nudgeability.models.families import get_family
from nudgeability.models.testing.tiny import tiny_config, tiny_model
from nudgeability.models.testing.tiny_tokenizers import TINY_FAMILIES, tiny_tokenizer

ARCH = {"qwen3": "qwen3", "glm_z1": "glm4", "gemma4": "gemma4", "chatml": "llama"}
# Markers that must be one token (as in the real vocabularies) in each tiny tokenizer.
SINGLE = {
    "qwen3": [
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
    ],
    "glm_z1": [
        "[gMASK]",
        "<sop>",
        "<|system|>",
        "<|user|>",
        "<|assistant|>",
        "<|observation|>",
        "<|endoftext|>",
    ],
    "gemma4": [
        "<bos>",
        "<eos>",
        "<|turn>",
        "<turn|>",
        "<|think|>",
        "<|channel>",
        "<channel|>",
        "<|tool>",
        "<tool|>",
        "<|tool_call>",
        "<tool_call|>",
        '<|"|>',
    ],
    "chatml": ["<|im_start|>", "<|im_end|>", "<|endoftext|>"],
}


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_tiny_tokenizer_fits_a_320_token_model(family):
    assert len(tiny_tokenizer(family)) <= 320


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_family_markers_are_single_tokens(family):
    fam = get_family(family, tiny_tokenizer(family))
    for marker in SINGLE[family]:
        assert fam.single_token_id(marker) is not None, marker


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_tiny_tokenizer_is_rebuilt_identically(family):
    again = tiny_tokenizer.__wrapped__(family)
    assert again.get_vocab() == tiny_tokenizer(family).get_vocab()
    text = "Emma <think>is</think> a novel, 1815 ✓"
    assert again.encode(text) == tiny_tokenizer(family).encode(text)
    assert again.decode(again.encode(text, add_special_tokens=False)) == text


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_special_ids_agree_with_the_paired_tiny_model_config(family):
    tok, cfg = tiny_tokenizer(family), tiny_config(ARCH[family])
    eos = cfg.eos_token_id if isinstance(cfg.eos_token_id, list) else [cfg.eos_token_id]
    if cfg.eos_token_id is not None:
        assert tok.eos_token_id in eos
    if cfg.pad_token_id is not None:
        assert tok.pad_token_id == cfg.pad_token_id
    if cfg.bos_token_id is not None:
        assert tok.bos_token_id == cfg.bos_token_id
    fam = get_family(family, tok)
    assert tok.eos_token_id in fam.stop_token_ids


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_a_rendered_prompt_runs_through_the_paired_tiny_model(family, conversation, retrieve_tool):
    ids = get_family(family, tiny_tokenizer(family)).render(conversation, tools=[retrieve_tool])
    model = tiny_model(ARCH[family], num_layers=1)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), 320)
    assert torch.isfinite(logits).all()


def test_unknown_tiny_family_lists_the_known_ones():
    with pytest.raises(ValueError, match="qwen3, glm_z1, gemma4, chatml"):
        tiny_tokenizer("llama")
