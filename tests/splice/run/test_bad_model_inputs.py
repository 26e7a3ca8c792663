"""Bad model and data inputs to `nudge run` (issue 12, item 6): each one line, exit status 2,
naming the file and the problem, no traceback, no misleading advice, nothing written."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers.tiny_runs import nudge_run_args, run_nudge


@pytest.fixture
def fail(tmp_path):
    out = tmp_path / "out"

    def run(model, *extra) -> str:
        status, err = run_nudge([*nudge_run_args(model, out, n=1, max_new_tokens=4), *extra])
        assert status == 2, err
        assert err.count("\n") == 1 and err.startswith("nudge run: error: "), err
        assert not out.exists()
        return err.strip()

    return run


@pytest.fixture
def model_copy(tiny_checkpoint, tmp_path):
    def copy(arch: str = "qwen3"):
        return shutil.copytree(tiny_checkpoint(arch), tmp_path / "model")

    return copy


def _edit_config(directory, edit):
    path = directory / "config.json"
    path.write_text(edit(path.read_text()))
    return path


def test_invalid_config_json_names_the_file(fail, model_copy):
    path = _edit_config(model_copy(), lambda text: text[: len(text) // 2])
    err = fail(path.parent)
    assert str(path) in err and "JSON" in err


@pytest.mark.parametrize(
    "edit,needle",
    [
        (lambda c: json.dumps([json.loads(c)]), "a JSON object"),
        (
            lambda c: json.dumps(
                {**json.loads(c), "quantization_config": [{"quant_method": "fp8"}]}
            ),
            "quantization_config",
        ),
    ],
    ids=["list", "list-quantization-config"],
)
def test_a_config_of_the_wrong_shape_names_the_field(fail, model_copy, edit, needle):
    path = _edit_config(model_copy(), edit)
    err = fail(path.parent)
    assert str(path) in err and needle in err


@pytest.mark.parametrize("keep", [0.5, 0.02], ids=["half", "header-only"])
def test_a_truncated_safetensors_file_names_the_file(fail, model_copy, keep):
    directory = model_copy()
    weights = directory / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: int(len(data) * keep)])
    err = fail(directory)
    assert str(weights) in err and ("truncated" in err or "damaged" in err), err


def test_a_garbled_safetensors_header_names_the_file(fail, model_copy):
    directory = model_copy()
    weights = directory / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[8:40] = b"\xff" * 32
    weights.write_bytes(bytes(data))
    err = fail(directory)
    assert str(weights) in err, err


@pytest.mark.parametrize("keep", [100, 4 << 20], ids=["in-header", "in-tensors"])
def test_a_truncated_gguf_names_the_file(fail, tmp_path, keep, monkeypatch):
    from nudgeability.models.smollm2 import find_gguf

    monkeypatch.setenv("NUDGE_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "cut.gguf"
    with find_gguf().open("rb") as handle:
        gguf.write_bytes(handle.read(keep))
    err = fail(gguf)
    assert str(gguf) in err and "GGUF" in err, err


def test_a_missing_path_is_not_taken_for_a_hub_id(fail, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad").mkdir()
    err = fail("bad/does-not-exist")
    assert "does not exist" in err and "huggingface-cli download" not in err, err
    err = fail("models/Qwen3-8B.gguf")
    assert "does not exist" in err and "huggingface-cli download" not in err, err


def test_a_model_directory_without_tokenizer_files_says_so(fail, model_copy):
    directory = model_copy()
    for path in directory.iterdir():
        if path.name.startswith(
            ("tokenizer", "special_tokens", "vocab", "merges", "chat_template")
        ):
            path.unlink()
    err = fail(directory)
    assert "tokenizer" in err and "sentencepiece" not in err and "tiktoken" not in err, err


def test_layer_counts_that_disagree_are_named(fail, model_copy):
    directory = model_copy()

    def more_layers(text):
        config = json.loads(text)
        config["num_hidden_layers"] += 2
        config.pop("layer_types", None)
        return json.dumps(config)

    _edit_config(directory, more_layers)
    err = fail(directory)
    assert "num_hidden_layers" in err and "config.json" in err, err


def test_layer_types_that_disagree_with_num_hidden_layers_are_named(fail, model_copy):
    directory = model_copy()

    def fewer_types(text):
        config = json.loads(text)
        config["layer_types"] = ["full_attention"] * (config["num_hidden_layers"] + 1)
        return json.dumps(config)

    _edit_config(directory, fewer_types)
    err = fail(directory)
    assert "layer_types" in err and "num_hidden_layers" in err, err


def test_data_of_the_other_task_is_recognised(tiny_checkpoint, tmp_path):
    from nudgeability.splice.tasks import get_task

    for task, other in (("musique", "strategyqa"), ("strategyqa", "musique")):
        data = get_task(other).default_data_path()
        model = tiny_checkpoint("qwen3")
        argv = nudge_run_args(
            model, tmp_path / task, task=task, data=data, n=1, max_new_tokens=None
        )
        status, err = run_nudge(argv)
        assert status == 2 and err.count("\n") == 1, err
        assert str(data) in err and other in err and "fetch" not in err, err
