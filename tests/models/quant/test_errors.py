"""Each kind of bad checkpoint raises one `QuantCheckpointError` (a ValueError) naming the tensor or key."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file

from nudgeability.models.loader import ModelLoadError
from nudgeability.models.quant import QuantCheckpointError, load_quantized

Q = "model.layers.0.self_attn.q_proj"
DOWN = "model.layers.1.mlp.down_proj"


def _variant(case, qt, tmp_path, tensors=None, qcfg=None):
    """A copy of `case`'s checkpoint with its tensors and/or quantization_config edited in place."""
    directory = tmp_path / "bad"
    shutil.copytree(case.directory, directory)
    if tensors is not None:
        state = qt.read_tensors(directory)
        tensors(state)
        save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    if qcfg is not None:
        config = json.loads((directory / "config.json").read_text())
        qcfg(config["quantization_config"])
        (directory / "config.json").write_text(json.dumps(config))
    return directory


def _fails(directory, *needles):
    with pytest.raises(QuantCheckpointError) as info:
        load_quantized(directory)
    message = str(info.value)
    assert isinstance(info.value, ValueError) and "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


@pytest.mark.parametrize(
    "fmt,key",
    [
        ("fp8_b32_f16", f"{Q}.weight_scale_inv"),
        ("fp8_b32_f16", f"{Q}.weight"),
        ("w4a16_g32_asym", f"{Q}.weight_packed"),
        ("w4a16_g32_asym", f"{Q}.weight_scale"),
        ("w4a16_g32_asym", f"{Q}.weight_shape"),
        ("bnb_nf4_dq", f"{Q}.weight.absmax"),
        ("bnb_nf4_dq", f"{Q}.weight.nested_absmax"),
        ("bnb_nf4_dq", f"{Q}.weight.quant_state.bitsandbytes__nf4"),
        ("bnb_nf4_dq", "model.norm.weight"),
        ("fp8_b32_f16", "model.embed_tokens.weight"),
    ],
)
def test_a_missing_tensor_is_named(checkpoint, qt, tmp_path, fmt, key):
    directory = _variant(checkpoint("qwen3", fmt), qt, tmp_path, tensors=lambda t: t.pop(key))
    _fails(directory, repr(key), "missing")


@pytest.mark.parametrize(
    "fmt,key,shape",
    [
        (
            "fp8_b32_f16",
            f"{DOWN}.weight_scale_inv",
            (4, 2),
        ),  # transposed grid: [64, 128] has 2 x 4 blocks
        ("fp8_b32_f16", f"{DOWN}.weight", (128, 64)),
        ("w4a16_g32_asym", f"{DOWN}.weight_scale", (64, 2)),
        ("w4a16_g32_asym", f"{DOWN}.weight_packed", (64, 8)),
        ("w4a16_g32_asym", f"{DOWN}.weight_zero_point", (64, 4)),  # unpacked zero points
        ("bnb_nf4_dq", f"{DOWN}.weight", (2048, 2)),
        ("bnb_nf4_dq", f"{DOWN}.weight.absmax", (64,)),
        ("bnb_nf4", "model.norm.weight", (32,)),
    ],
)
def test_a_tensor_of_the_wrong_shape_is_named(checkpoint, qt, tmp_path, fmt, key, shape):
    def reshape(t):
        t[key] = torch.zeros(shape, dtype=t[key].dtype)

    directory = _variant(checkpoint("qwen3", fmt), qt, tmp_path, tensors=reshape)
    _fails(directory, repr(key))


def test_a_weight_shape_that_disagrees_with_the_model_is_named(checkpoint, qt, tmp_path):
    def edit(t):
        t[f"{DOWN}.weight_shape"] = torch.tensor([64, 96])

    directory = _variant(checkpoint("qwen3", "w4a16_g32_sym"), qt, tmp_path, tensors=edit)
    _fails(directory, f"'{DOWN}.weight_shape'", "[64, 96]")


@pytest.mark.parametrize("block", [[128], [128, 128, 1], 128, [0, 128], ["128", "128"], None])
def test_a_weight_block_size_that_is_not_two_positive_ints_is_rejected(
    checkpoint, qt, tmp_path, block
):
    directory = _variant(
        checkpoint("qwen3", "fp8_b128_bf16"),
        qt,
        tmp_path,
        qcfg=lambda q: q.update(weight_block_size=block),
    )
    _fails(directory, "quantization_config.weight_block_size")


@pytest.mark.parametrize("bits", [2, 3, 16, None])
def test_pack_quantized_num_bits_other_than_4_or_8_is_rejected(checkpoint, qt, tmp_path, bits):
    def edit(q):
        q["config_groups"]["group_0"]["weights"]["num_bits"] = bits

    directory = _variant(checkpoint("qwen3", "w4a16_g32_sym"), qt, tmp_path, qcfg=edit)
    _fails(directory, "quantization_config.config_groups.group_0.weights.num_bits")


@pytest.mark.parametrize(
    "edit,key",
    [
        (lambda q: q.update(bnb_4bit_quant_type="int4"), "bnb_4bit_quant_type"),
        (lambda q: q.update(bnb_4bit_quant_type="fp8"), "bnb_4bit_quant_type"),
        (
            lambda q: q.update(
                load_in_8bit=True, load_in_4bit=False, _load_in_8bit=True, _load_in_4bit=False
            ),
            "load_in_8bit",
        ),
        (lambda q: q.update(bnb_4bit_quant_storage="bfloat16"), "bnb_4bit_quant_storage"),
    ],
)
def test_an_unsupported_bitsandbytes_mode_is_rejected(checkpoint, qt, tmp_path, edit, key):
    directory = _variant(checkpoint("qwen3", "bnb_nf4_dq"), qt, tmp_path, qcfg=edit)
    _fails(directory, f"quantization_config.{key}")


def test_fp4_is_supported_on_cpu_so_a_quant_type_disagreeing_with_the_file_is_what_fails(
    checkpoint, qt, tmp_path
):
    # bitsandbytes 0.50 runs fp4 on CPU (see test_exactness); an nf4 file declared fp4 names both.
    directory = _variant(
        checkpoint("qwen3", "bnb_nf4_dq"),
        qt,
        tmp_path,
        qcfg=lambda q: q.update(bnb_4bit_quant_type="fp4"),
    )
    _fails(directory, "bitsandbytes__fp4", "nf4 state", "bnb_4bit_quant_type")


def test_double_quantised_tensors_under_a_config_without_double_quant_are_rejected(
    checkpoint, qt, tmp_path
):
    directory = _variant(
        checkpoint("qwen3", "bnb_nf4_dq"),
        qt,
        tmp_path,
        qcfg=lambda q: q.update(bnb_4bit_use_double_quant=False),
    )
    _fails(directory, "nested_absmax", "bnb_4bit_use_double_quant")


def test_an_asymmetric_config_without_zero_points_names_the_missing_zero_point(
    checkpoint, qt, tmp_path
):
    def edit(q):
        q["config_groups"]["group_0"]["weights"]["symmetric"] = False

    directory = _variant(checkpoint("qwen3", "w4a16_g32_sym"), qt, tmp_path, qcfg=edit)
    _fails(directory, ".weight_zero_point'", "asymmetric")


@pytest.mark.parametrize("method", ["awq", "gptq", None])
def test_an_unknown_quant_method_is_named(checkpoint, qt, tmp_path, method):
    directory = _variant(
        checkpoint("qwen3", "fp8_b32_f16"),
        qt,
        tmp_path,
        qcfg=lambda q: q.update(quant_method=method),
    )
    _fails(directory, "quantization_config.quant_method", repr(method))


@pytest.mark.parametrize(
    "fmt,edit,key",
    [
        (
            "w4a16_g32_sym",
            lambda q: q.update(format="float-quantized"),
            "quantization_config.format",
        ),
        (
            "w4a16_g32_sym",
            lambda q: q.update(quantization_status="frozen"),
            "quantization_config.quantization_status",
        ),
        (
            "w4a16_g32_sym",
            lambda q: q["config_groups"]["group_0"]["weights"].update(strategy="tensor"),
            "weights.strategy",
        ),
        (
            "w4a16_g32_sym",
            lambda q: q["config_groups"]["group_0"].update(input_activations={"num_bits": 8}),
            "input_activations",
        ),
        (
            "w4a16_g32_sym",
            lambda q: q["config_groups"]["group_0"]["weights"].update(group_size=48),
            "weights.group_size",
        ),
        ("fp8_b32_f16", lambda q: q.update(fmt="e5m2"), "quantization_config.fmt"),
        (
            "fp8_b32_f16",
            lambda q: q.update(activation_scheme="static"),
            "quantization_config.activation_scheme",
        ),
        (
            "fp8_b32_f16",
            lambda q: q.update(modules_to_not_convert=["down_proj"]),
            "mlp.down_proj.weight' is stored as float8",
        ),
        (
            "bnb_nf4",
            lambda q: q.update(llm_int8_skip_modules=["o_proj"]),
            "o_proj.weight' is stored as uint8",
        ),
        (
            "w4a16_g32_sym",
            lambda q: q.update(ignore=["lm_head", "re:.*up_proj$"]),
            "up_proj.weight_",
        ),
    ],
)
def test_other_unsupported_or_inconsistent_configs_name_their_key(
    checkpoint, qt, tmp_path, fmt, edit, key
):
    directory = _variant(checkpoint("qwen3", fmt), qt, tmp_path, qcfg=edit)
    _fails(directory, key)


def test_group_indices_outside_the_groups_are_rejected(checkpoint, qt, tmp_path):
    def edit(t):
        t[f"{DOWN}.weight_g_idx"] = torch.full((128,), 4, dtype=torch.int32)  # 4 groups: 0..3

    directory = _variant(checkpoint("qwen3", "w4a16_g32_sym"), qt, tmp_path, tensors=edit)
    _fails(directory, f"'{DOWN}.weight_g_idx'")


def test_the_model_loader_rejects_an_unknown_quant_method_before_loading(
    checkpoint, qt, tmp_path, tiny_tokenizer
):
    from nudgeability.models.loader import load_model

    directory = _variant(
        checkpoint("qwen3", "fp8_b32_f16"),
        qt,
        tmp_path,
        qcfg=lambda q: q.update(quant_method="awq"),
    )
    tiny_tokenizer.save_pretrained(directory)
    with pytest.raises(ModelLoadError, match="quant_method='awq'"):
        load_model(directory)
