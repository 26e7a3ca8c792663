"""One quantised linear of each format of models/quant/ on CPU tensors, with its weight in
float64 computed by another path than the layer's (the libraries' own packers and
dequantisers, or the format's formula in torch): what the batch-invariant GEMM tests
(tests/engine/invariant/cuda/) run and check against."""

from __future__ import annotations

import torch


def w4a16_layer(n: int, k: int, group: int = 64, seed: int = 0):
    """(an asymmetric compressed-tensors W4A16 layer, its float64 weight (q - zp) * s)."""
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    from nudgeability.models.quant.w4a16_linear import PackQuantizedLinear

    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
    scale = (torch.rand(n, k // group, generator=gen) + 0.1) / 16
    zp = torch.randint(-8, 8, (n, k // group), generator=gen, dtype=torch.int8)
    layer = PackQuantizedLinear(
        pack_to_int32(q, 4),
        scale,
        torch.tensor([n, k]),
        4,
        pack_to_int32(zp, 4, packed_dim=0),
    )
    expand = lambda t: t.double().repeat_interleave(group, dim=1)  # noqa: E731
    return layer, (q.double() - expand(zp)) * expand(scale)


def fp8_layer(n: int, k: int, block=(32, 64), seed: int = 1):
    """(an FP8 block layer, partial blocks included, and its float64 weight: torch's e4m3
    decoding times the block's scale)."""
    from nudgeability.models.quant.fp8_linear import FP8BlockLinear, quantize_fp8_block

    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen) * torch.logspace(-3, 0, k)  # subnormal codes too
    codes, scale_inv = quantize_fp8_block(w, block, torch.float32)
    scale = scale_inv.double().repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)
    return FP8BlockLinear(codes, scale_inv, block), codes.double() * scale[:n, :k]


def bnb4_layer(n: int, k: int, quant_type: str = "nf4", seed: int = 2):
    """(a bitsandbytes 4-bit layer, its weight as bitsandbytes' own `dequantize_4bit` gives it)."""
    from bitsandbytes.functional import dequantize_4bit, quantize_4bit

    from nudgeability.models.quant import BnB4Linear

    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen) / 16
    packed, state = quantize_4bit(w, blocksize=64, compress_statistics=False, quant_type=quant_type)
    return BnB4Linear(packed, state), dequantize_4bit(packed, state).double()
