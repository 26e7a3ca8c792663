"""What a run computes in when its flags leave it to the device (splice/run/validation.py
`device_defaults`): on CPU float32 and the eager cascade, as always; on CUDA the checkpoint's own
compute dtype, read from its config.json as saved (bf16, or fp16 where it is fp16; bf16 for
quantised and fp32 checkpoints), and graphed fixed-shape decode. A CUDA run is resolved here on
CPU: the engine's device test answers as on CUDA (its KV pool sized from free memory)."""

from __future__ import annotations

import json

import pytest
import torch

from nudgeability.cli import build_parser
from nudgeability.models.quant.writers import write_fp8
from nudgeability.models.testing.tiny import tiny_model
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.validation import DeviceDefaults, device_defaults


@pytest.fixture
def cuda_pool(monkeypatch):
    from nudgeability.engine import engine as engine_module

    monkeypatch.setattr(engine_module, "sizes_pool_from_memory", lambda device: True)


def _saved(tmp_path, dtype: torch.dtype) -> str:
    directory = tmp_path / str(dtype).removeprefix("torch.")
    tiny_model("qwen3", num_layers=1).to(dtype).save_pretrained(directory)
    return str(directory)


def test_a_cpu_run_computes_in_float32_on_the_eager_cascade(tmp_path):
    model = _saved(tmp_path, torch.bfloat16)
    assert device_defaults(RunConfig(model=model), "cpu") == DeviceDefaults("float32", False)


@pytest.mark.parametrize(
    "saved,expected",
    [(torch.bfloat16, "bfloat16"), (torch.float16, "float16"), (torch.float32, "bfloat16")],
)
def test_a_cuda_run_takes_the_checkpoint_s_dtype_and_graphed_decode(
    tmp_path, cuda_pool, saved, expected
):
    model = _saved(tmp_path, saved)
    stated = json.loads((tmp_path / str(saved).removeprefix("torch.") / "config.json").read_text())
    assert stated["dtype"] == str(saved).removeprefix("torch.")  # what the rule reads
    assert device_defaults(RunConfig(model=model), "cuda") == DeviceDefaults(expected, True)


def test_a_quantised_checkpoint_computes_in_bfloat16_on_cuda(tmp_path, cuda_pool):
    out = tmp_path / "fp8"
    write_fp8(tiny_model("qwen3", num_layers=1), out)
    assert json.loads((out / "config.json").read_text())["quantization_config"]
    assert device_defaults(RunConfig(model=str(out)), "cuda") == DeviceDefaults("bfloat16", True)


def test_what_is_asked_for_is_kept(tmp_path, cuda_pool):
    model = _saved(tmp_path, torch.bfloat16)
    asked = RunConfig(model=model, dtype="float32", static_decode=False)
    assert device_defaults(asked, "cuda") == DeviceDefaults("float32", False)


def test_the_flags_default_to_the_device_and_say_so():
    parser = build_parser(["run"])
    run = parser._subparsers._group_actions[0].choices["run"]
    actions = {a.dest: a for a in run._actions}
    assert actions["dtype"].default is None and actions["static_decode"].default is None
    assert "on CUDA the checkpoint's own" in actions["dtype"].help
    assert "default: on with CUDA" in actions["static_decode"].help
    args = parser.parse_args(["run", "--no-static-decode"])
    assert args.static_decode is False and args.dtype is None
