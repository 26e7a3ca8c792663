"""Choosing the family: by config.json model_type, by the tokenizer's special tokens, by override;
an unknown family is an error that lists the known ones."""

from __future__ import annotations

import json

import pytest

from nudgeability.models.families import KNOWN_FAMILIES, FamilyError, detect_family, get_family
from nudgeability.models.testing.tiny import tiny_config, tiny_model
from nudgeability.models.testing.tiny_tokenizers import tiny_tokenizer

PAIRS = [("qwen3", "qwen3"), ("glm4", "glm_z1"), ("gemma4", "gemma4")]


@pytest.mark.parametrize("arch,family", PAIRS)
def test_model_type_of_a_config_object_picks_the_family(arch, family):
    assert detect_family(tiny_config(arch), tiny_tokenizer("chatml")).name == family


@pytest.mark.parametrize("arch,family", PAIRS)
def test_model_type_in_a_checkpoint_directory_picks_the_family(tmp_path, arch, family):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": tiny_config(arch).model_type}))
    assert detect_family(tmp_path, tiny_tokenizer("chatml")).name == family
    assert detect_family(str(tmp_path / "config.json"), tiny_tokenizer("chatml")).name == family


def test_model_type_of_a_multimodal_text_config_picks_the_family():
    config = {"model_type": "gemma4_vlm_wrapper", "text_config": {"model_type": "gemma4_text"}}
    assert detect_family(config, tiny_tokenizer("chatml")).name == "gemma4"


def test_a_model_object_is_read_through_its_config():
    assert (
        detect_family(tiny_model("glm4", num_layers=1), tiny_tokenizer("glm_z1")).name == "glm_z1"
    )


@pytest.mark.parametrize("family", ["qwen3", "glm_z1", "gemma4", "chatml"])
def test_special_tokens_pick_the_family_when_model_type_says_nothing(family):
    assert detect_family({"model_type": "llama"}, tiny_tokenizer(family)).name == family
    assert detect_family(None, tiny_tokenizer(family)).name == family


def test_override_wins_over_model_type_and_tokens():
    fam = detect_family(tiny_config("qwen3"), tiny_tokenizer("qwen3"), override="chatml")
    assert fam.name == "chatml"


def test_unknown_override_lists_the_known_families():
    with pytest.raises(FamilyError) as info:
        detect_family(None, tiny_tokenizer("qwen3"), override="mistral")
    for name in KNOWN_FAMILIES:
        assert name in str(info.value)


def test_undetectable_family_is_an_error_that_lists_the_known_ones():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel()
    plain = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>")
    with pytest.raises(FamilyError, match="model_type: llama") as info:
        detect_family({"model_type": "llama"}, plain)
    assert all(name in str(info.value) for name in KNOWN_FAMILIES)
    assert "override" in str(info.value)


def test_unreadable_config_path_names_the_file(tmp_path):
    with pytest.raises(FamilyError, match="config.json"):
        detect_family(tmp_path, tiny_tokenizer("qwen3"))


def test_get_family_rejects_unknown_names_listing_known_ones():
    with pytest.raises(FamilyError, match="qwen3, glm_z1, gemma4, chatml"):
        get_family("llama3", tiny_tokenizer("qwen3"))
    assert isinstance(FamilyError("x"), ValueError)
