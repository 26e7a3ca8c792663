"""A checkpoint whose config.json contradicts its tensors is refused, naming the tensor.

Every tensor under a quantised layer must be read by the scheme the config declares; one that is
not (zero points under `symmetric: true`, a quant state of another type, scales of a block grid
other than the declared one) means the config describes another checkpoint, and loading it
anyway gives wrong logits without a word (issue 12, item 1).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file

from nudgeability.models.quant import QuantCheckpointError, load_quantized

Q = "model.layers.0.self_attn.q_proj"


def _copy(case, tmp_path, qcfg=None, tensors=None):
    directory = tmp_path / "edited"
    shutil.copytree(case.directory, directory)
    if qcfg is not None:
        config = json.loads((directory / "config.json").read_text())
        qcfg(config["quantization_config"])
        (directory / "config.json").write_text(json.dumps(config))
    if tensors is not None:
        from safetensors.torch import load_file

        state = load_file(str(directory / "model.safetensors"))
        tensors(state)
        save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


def _refused(directory, *needles):
    with pytest.raises(QuantCheckpointError) as info:
        load_quantized(directory)
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_zero_points_under_a_symmetric_config_are_refused(checkpoint, tmp_path):
    def symmetric(q):
        q["config_groups"]["group_0"]["weights"]["symmetric"] = True

    directory = _copy(checkpoint("qwen3", "w4a16_g32_asym"), tmp_path, qcfg=symmetric)
    _refused(directory, ".weight_zero_point'", "symmetric")


def test_a_bnb_state_of_another_quant_type_is_refused(checkpoint, tmp_path):
    # An nf4 checkpoint that also carries an fp4 quant state for one layer: the config says nf4,
    # so the fp4 state belongs to another checkpoint.
    fp4 = checkpoint("qwen3", "bnb_fp4_dq").directory

    def add_fp4_state(state):
        from safetensors.torch import load_file

        key = f"{Q}.weight.quant_state.bitsandbytes__fp4"
        state[key] = load_file(str(fp4 / "model.safetensors"))[key]

    directory = _copy(checkpoint("qwen3", "bnb_nf4_dq"), tmp_path, tensors=add_fp4_state)
    _refused(directory, "bitsandbytes__fp4'")


def test_a_bnb_state_whose_own_quant_type_disagrees_is_refused(checkpoint, tmp_path):
    # The fp4 checkpoint's packed states renamed to the nf4 key, config switched to nf4: the key
    # and the config agree, but the state itself records fp4.
    def rename(state):
        for key in [k for k in state if k.endswith("bitsandbytes__fp4")]:
            state[key.replace("__fp4", "__nf4")] = state.pop(key)

    directory = _copy(
        checkpoint("qwen3", "bnb_fp4_dq"),
        tmp_path,
        qcfg=lambda q: q.update(bnb_4bit_quant_type="nf4"),
        tensors=rename,
    )
    _refused(directory, "fp4", "bnb_4bit_quant_type")


def test_fp8_scales_of_another_block_grid_are_refused(checkpoint, tmp_path):
    # Written with 48x40 blocks; the config claims 32x32. Layers whose grid shape differs are
    # caught by shape; this checks the whole load is refused, naming a scale tensor.
    directory = _copy(
        checkpoint("qwen3", "fp8_b48x40_f32"),
        tmp_path,
        qcfg=lambda q: q.update(weight_block_size=[32, 32]),
    )
    _refused(directory, ".weight_scale_inv'")


def test_an_extra_tensor_inside_a_quantised_layer_is_refused(checkpoint, tmp_path):
    def extra(state):
        state[f"{Q}.weight_g_scale"] = torch.ones(1)

    directory = _copy(checkpoint("qwen3", "fp8_b32_f16"), tmp_path, tensors=extra)
    _refused(directory, f"'{Q}.weight_g_scale'")


def test_consistent_checkpoints_still_load(checkpoint):
    for fmt in ("w4a16_g32_asym", "w4a16_g32_sym", "bnb_nf4_dq", "bnb_fp4_dq", "fp8_b48x40_f32"):
        load_quantized(checkpoint("qwen3", fmt).directory)
