"""FP8 block dequantisation on hand-checked values, and the FP8 writer's rounding error."""

from __future__ import annotations

import torch

from nudgeability.models.quant.fp8_linear import (
    FP8BlockLinear,
    dequantize_fp8_block,
    fp8_to_float32,
    quantize_fp8_block,
)


def test_every_fp8_code_converts_to_the_same_float32_as_torch():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn)
    ours, torch_values = fp8_to_float32(codes), codes.to(torch.float32)
    finite = ~torch_values.isnan()  # 0x7F and 0xFF are NaN in e4m3fn
    assert int(finite.sum()) == 254
    assert torch.equal(ours[finite], torch_values[finite])
    assert torch.equal(
        torch.signbit(ours[finite]), torch.signbit(torch_values[finite])
    )  # -0.0 stays -0.0


def test_each_block_including_partial_last_blocks_is_multiplied_by_its_own_scale():
    # 3x5 weight, 2x2 blocks: a 2x3 scale grid whose last row and column of blocks are partial.
    weight = torch.tensor(
        [[1.0, -2.0, 0.5, 3.0, -1.0], [4.0, 1.5, 2.0, -0.25, 6.0], [-3.0, 1.0, 0.75, 2.0, 1.0]]
    )
    fp8 = weight.to(torch.float8_e4m3fn)  # all exactly representable
    scale_inv = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.bfloat16)
    expected = torch.tensor(
        [
            [1.0, -2.0, 1.0, 6.0, -3.0],
            [4.0, 1.5, 4.0, -0.5, 18.0],
            [-12.0, 4.0, 3.75, 10.0, 6.0],
        ]
    )
    assert torch.equal(dequantize_fp8_block(fp8, scale_inv, (2, 2)), expected)
    layer = FP8BlockLinear(fp8, scale_inv, (2, 2), bias=torch.tensor([1.0, 0.0, -1.0]))
    x = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0]])
    assert torch.equal(
        layer(x), expected.sum(dim=1, keepdim=True).T + torch.tensor([1.0, 0.0, -1.0])
    )
    assert layer.weight.dtype == torch.float8_e4m3fn  # the layer keeps FP8 storage


def test_writer_error_is_within_fp8_rounding_of_each_block():
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(70, 45, generator=gen) * torch.logspace(
        -3, 1, 45
    )  # columns of very different size
    for scale_dtype in (torch.bfloat16, torch.float16, torch.float32):
        q, scale_inv = quantize_fp8_block(w, (32, 16), scale_dtype)
        assert q.dtype == torch.float8_e4m3fn and q.shape == w.shape
        assert scale_inv.dtype == scale_dtype and scale_inv.shape == (3, 3)
        deq = dequantize_fp8_block(q, scale_inv, (32, 16))
        scale = scale_inv.float().repeat_interleave(32, 0)[:70].repeat_interleave(16, 1)[:, :45]
        # e4m3: 3 mantissa bits (relative error <= 2^-4), subnormal spacing 2^-9 times the block scale
        bound = w.abs() * 2.0**-4 + scale * 2.0**-10
        assert bool(((deq - w).abs() <= bound * (1 + 1e-6)).all()), scale_dtype
        # the largest element of each block uses the top of the FP8 range
        assert q.float().abs().amax() >= 400


def test_an_all_zero_block_gets_scale_one_and_zero_weights():
    w = torch.zeros(4, 4)
    w[2:, 2:] = 1.0
    q, scale_inv = quantize_fp8_block(w, (2, 2), torch.float32)
    assert scale_inv[0, 0] == 1.0 and torch.equal(dequantize_fp8_block(q, scale_inv, (2, 2)), w)
