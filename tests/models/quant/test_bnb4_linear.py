"""bitsandbytes 4-bit: the saved layout read by hand agrees with the loaded layers."""

from __future__ import annotations

import json

import pytest
import torch


@pytest.mark.parametrize("fmt", ["bnb_nf4_dq", "bnb_nf4", "bnb_fp4_dq"])
def test_saved_codes_high_nibble_first_times_block_absmax_give_the_loaded_weight(
    checkpoint, qt, fmt
):
    case = checkpoint("glm4", fmt)
    tensors = qt.read_tensors(case.directory)
    model = qt.load(case)
    for name, layer in qt.quantised_modules(model).items():
        packed = tensors[f"{name}.weight"].flatten()
        state_key = next(
            k for k in tensors if k.startswith(f"{name}.weight.quant_state.bitsandbytes__")
        )
        state = json.loads(bytes(tensors[state_key].tolist()).decode())
        out, inp = state["shape"]
        codes = (
            torch.stack([packed >> 4, packed & 0xF], dim=1).flatten()[: out * inp].long()
        )  # high nibble first
        absmax = tensors[f"{name}.weight.absmax"]
        if f"{name}.weight.nested_absmax" in tensors:
            blocks = torch.arange(absmax.numel()) // state["nested_blocksize"]
            nested = (
                tensors[f"{name}.weight.nested_quant_map"][absmax.long()]
                * tensors[f"{name}.weight.nested_absmax"][blocks]
            )
            absmax = nested + state["nested_offset"]
        table = tensors[f"{name}.weight.quant_map"]
        expected = (table[codes] * absmax[torch.arange(out * inp) // state["blocksize"]]).view(
            out, inp
        )
        assert state["quant_type"] == fmt.split("_")[1] and state["blocksize"] == 64
        assert torch.equal(layer.dequantize(), expected), name
        assert layer.weight.dtype == torch.uint8 and layer.weight.shape == ((out * inp + 1) // 2, 1)
