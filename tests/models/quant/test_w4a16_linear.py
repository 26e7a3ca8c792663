"""compressed-tensors pack-quantized: bit layout, 8-bit words, and per-column groups (g_idx)."""

from __future__ import annotations

import json
import shutil

import torch
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32, unpack_from_int32
from safetensors.torch import save_file

from nudgeability.models.quant import load_quantized
from nudgeability.models.quant.w4a16_linear import unpack_int32


def test_column_zero_sits_in_the_lowest_nibble_stored_as_q_plus_8():
    word = torch.tensor(
        [[0x76543210, 0x0000000F]], dtype=torch.int32
    )  # nibbles 0..7, then 15, 0, 0, ...
    assert unpack_int32(word, 4, 10).tolist() == [[-8, -7, -6, -5, -4, -3, -2, -1, 7, -8]]
    # the top nibble of a negative int32 word (sign bit set) unpacks like any other
    assert unpack_int32(torch.tensor([[-(2**31)]], dtype=torch.int32), 4, 8).tolist() == [
        [-8] * 7 + [0]
    ]
    word8 = torch.tensor([[0x7F80FF00]], dtype=torch.int32)  # bytes 00, FF, 80, 7F from the lowest
    assert unpack_int32(word8, 8, 4).tolist() == [[-128, 127, 0, -1]]


def test_unpacking_agrees_with_compressed_tensors_pack_for_4_and_8_bits():
    gen = torch.Generator().manual_seed(0)
    for bits in (4, 8):
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        values = torch.randint(
            lo, hi + 1, (13, 37), generator=gen, dtype=torch.int8
        )  # 37: a partial last word
        packed = pack_to_int32(values, bits)
        assert torch.equal(unpack_int32(packed, bits, 37), values)
        assert torch.equal(
            unpack_int32(packed, bits, 37), unpack_from_int32(packed, bits, torch.Size([13, 37]))
        )
        rows = pack_to_int32(values, bits, packed_dim=0)  # zero points are packed along rows
        assert torch.equal(unpack_int32(rows.t(), bits, 13).t(), values)


def test_g_idx_assigns_each_input_column_to_its_group(checkpoint, qt, tmp_path):
    case = checkpoint("qwen3", "w4a16_g32_asym")
    name = "model.layers.1.mlp.down_proj"  # in 128 -> 4 groups of 32
    tensors = qt.read_tensors(case.directory)
    perm = torch.randperm(128, generator=torch.Generator().manual_seed(3))
    g_idx = (perm // 32).to(torch.int32)  # every group keeps 32 columns, scattered
    directory = tmp_path / "g_idx"
    shutil.copytree(case.directory, directory)
    save_file({**tensors, f"{name}.weight_g_idx": g_idx}, str(directory / "model.safetensors"))
    layer = load_quantized(directory).get_submodule(name)
    # hand formula on the library's own unpacking: W[r, j] = (q[r, j] - zp[r, g[j]]) * scale[r, g[j]]
    q = unpack_from_int32(tensors[f"{name}.weight_packed"], 4, torch.Size([64, 128])).float()
    zp = unpack_from_int32(
        tensors[f"{name}.weight_zero_point"], 4, torch.Size([64, 4]), packed_dim=0
    ).float()
    scale = tensors[f"{name}.weight_scale"]
    g = g_idx.long()
    assert torch.equal(layer.dequantize(), (q - zp[:, g]) * scale[:, g])
    # the trivial g_idx (column j in group j // 32) changes nothing
    save_file(
        {**tensors, f"{name}.weight_g_idx": torch.arange(128, dtype=torch.int32) // 32},
        str(directory / "model.safetensors"),
    )
    assert torch.equal(
        load_quantized(directory).get_submodule(name).dequantize(),
        qt.reference_weights(case.directory)[name],
    )


def test_the_config_written_is_compressed_tensors_pack_quantized(checkpoint):
    case = checkpoint("gemma4", "w4a16_g32_sym")
    qcfg = json.loads((case.directory / "config.json").read_text())["quantization_config"]
    assert qcfg["quant_method"] == "compressed-tensors" and qcfg["format"] == "pack-quantized"
    assert qcfg["quantization_status"] == "compressed"
    weights = qcfg["config_groups"]["group_0"]["weights"]
    assert (
        weights["num_bits"],
        weights["group_size"],
        weights["strategy"],
        weights["symmetric"],
    ) == (4, 32, "group", True)
    # Gemma 4's per-layer projection has 8 inputs: group 32 cannot divide it, so it is ignored
    assert "lm_head" in qcfg["ignore"] and "model.layers.0.per_layer_projection" in qcfg["ignore"]
