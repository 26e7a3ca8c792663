"""The Triton kernels (and the CUDA paths that route to them) under TRITON_INTERPRET=1 on CPU,
on random shapes with partial tiles on every side, against the libraries' own dequantisation.

fp32 activations are multiplied in full fp32 (`input_precision="ieee"`) and summed in fp32, so
|y - ref| <= gamma(K + 2) * (|x| @ |W|.T) with gamma(n) = n u / (1 - n u), u = 2^-24 (the reference
y = x @ W.T in float64 on the library's dequantised W).
"""

from __future__ import annotations

import os

import pytest
import torch

# tests/conftest.py sets TRITON_INTERPRET=1 before triton is first imported (it is read then)
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 set before triton is imported", allow_module_level=True)
pytest.importorskip("triton")

from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32  # noqa: E402

from nudgeability.models.quant import cuda_kernels, triton_kernels  # noqa: E402
from nudgeability.models.quant.fp8_linear import (  # noqa: E402
    dequantize_fp8_block,
    quantize_fp8_block,
)
from nudgeability.models.quant.w4a16_linear import dequantize_pack_quantized  # noqa: E402

U32 = 2.0**-24
# (rows, outputs, inputs): partial BLOCK_M, BLOCK_N and BLOCK_K tiles (16, 64, 64), and exact ones
SHAPES = [(1, 70, 200), (17, 130, 96), (3, 64, 64), (33, 16, 320)]


@pytest.fixture(autouse=True, scope="module")
def _interpreted():
    triton_kernels._kernels.cache_clear()
    yield
    triton_kernels._kernels.cache_clear()


def _assert_close(y, x, weight):
    ref = x.double() @ weight.double().T
    k = x.shape[1]
    bound = (k + 2) * U32 / (1 - (k + 2) * U32) * (x.double().abs() @ weight.double().abs().T)
    assert y.dtype == x.dtype and y.shape == ref.shape
    assert bool(((y.double() - ref).abs() <= bound).all())


@pytest.mark.parametrize("rows,n,k", SHAPES)
@pytest.mark.parametrize("symmetric", [True, False])
def test_w4a16_kernel_reads_compressed_tensors_packing(rows, n, k, symmetric):
    gen = torch.Generator().manual_seed(rows * n + k)
    group = next(g for g in (64, 40, 32) if k % g == 0)
    q = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
    scale = torch.rand(n, k // group, generator=gen) + 0.1
    zp = (
        None
        if symmetric
        else torch.randint(-8, 8, (n, k // group), generator=gen, dtype=torch.int8)
    )
    packed = pack_to_int32(q, 4)
    zp_packed = None if zp is None else pack_to_int32(zp, 4, packed_dim=0)
    weight = dequantize_pack_quantized(packed, scale, 4, k, zp_packed)
    x = torch.randn(rows, k, generator=gen)
    signed = None if zp is None else zp.to(torch.int32)
    _assert_close(triton_kernels.w4a16_matmul(x, packed, scale, signed, group), x, weight)
    # the CUDA path on CPU tensors: tinygemm is not possible, so it is the same Triton kernel
    path = cuda_kernels.w4a16_path((q + 8).to(torch.uint8), scale, zp, group)
    assert path.name == "triton_w4a16"
    _assert_close(path.run(x), x, weight)


def test_the_cuda_path_repacks_fields_as_compressed_tensors_does():
    gen = torch.Generator().manual_seed(1)
    q = torch.randint(-8, 8, (9, 37), generator=gen, dtype=torch.int8)  # a partial last word
    repacked = cuda_kernels._repack_int32((q + 8).to(torch.uint8))
    assert torch.equal(repacked, pack_to_int32(q, 4))


@pytest.mark.parametrize("rows,n,k", SHAPES)
@pytest.mark.parametrize("block", [(128, 128), (32, 48)])
def test_fp8_kernel_decodes_e4m3_and_applies_block_scales(rows, n, k, block):
    gen = torch.Generator().manual_seed(rows + n + k)
    w = torch.randn(n, k, generator=gen) * torch.logspace(-3, 1, k)  # subnormal codes too
    weight, scale_inv = quantize_fp8_block(w, block, torch.bfloat16)
    reference = dequantize_fp8_block(weight, scale_inv, block)
    x = torch.randn(rows, k, generator=gen)
    _assert_close(triton_kernels.fp8_matmul(x, weight, scale_inv, block), x, reference)
    path = cuda_kernels.fp8_path(weight, scale_inv, block)
    _assert_close(path.run(x), x, reference)


@pytest.mark.parametrize("rows,n,k", SHAPES)
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
def test_4bit_kernel_reads_bitsandbytes_flat_packing(rows, n, k, quant_type):
    """Blocks of 64 run over the flattened weight, so with K = 200 or 96 they straddle rows.
    There bitsandbytes' CPU `dequantize_4bit` (0.50) is not the flat layout its quantiser wrote
    (it reconstructs w worse than the flat decoding does); so the reference is the flat decoding
    by hand, checked equal to `dequantize_4bit` wherever 64 divides K."""
    from bitsandbytes.functional import dequantize_4bit, quantize_4bit

    from nudgeability.models.quant import BnB4Linear

    gen = torch.Generator().manual_seed(rows * 7 + n + k)
    w = torch.randn(n, k, generator=gen)
    packed, state = quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type=quant_type)
    layer = BnB4Linear(packed, state)
    flat = packed.flatten()
    codes = torch.stack([flat >> 4, flat & 15], dim=1).flatten()[: n * k].long()
    absmax = layer.block_absmax()[torch.arange(n * k) // 64]
    reference = (state.code[codes] * absmax).view(n, k)
    if k % 64 == 0:
        assert torch.equal(reference, dequantize_4bit(packed, state))
    x = torch.randn(rows, k, generator=gen)
    y = triton_kernels.nf4_matmul(x, packed, layer.block_absmax(), state.code, 64, n)
    _assert_close(y, x, reference)
    path = cuda_kernels.nf4_path(layer)  # bitsandbytes here has no CUDA library: Triton
    assert path.name == "triton_4bit"
    _assert_close(path.run(x), x, reference)


# (rows, outputs, inputs) -> the tile `tile_for` gives there (BLOCK_M x BLOCK_N x BLOCK_K/split):
# every BLOCK_M (16, 32, 64), BLOCK_N (64, 128) and SPLIT_K (1, 2, 4, 8) it can return
WIDE = triton_kernels.WIDE_N
TILES = {
    (1, 64, 1024): "16x64x64/split8",
    (16, 64, 512): "16x64x64/split4",
    (40, 70, 256): "64x64x64/split2",
    (17, 130, 96): "32x64x64",
    (1, WIDE, 64): "16x128x64",
    (33, WIDE + 8, 64): "64x128x64",
}


def test_the_tile_choice_covers_every_class_at_these_shapes():
    tiles = {shape: triton_kernels.tile_for(*shape) for shape in TILES}
    assert {s: t.name for s, t in tiles.items()} == TILES
    assert {t.BLOCK_M for t in tiles.values()} == {16, 32, 64}
    assert {t.BLOCK_N for t in tiles.values()} == {64, 128}
    assert {t.SPLIT_K for t in tiles.values()} == {1, 2, 4, 8}
    # the split and the column tile depend on N and K only: a row's sums are cut the same way
    for rows in (1, 5, 16, 17, 64, 300):
        t = triton_kernels.tile_for(rows, 64, 1024)
        assert (t.BLOCK_N, t.SPLIT_K) == (64, 8)


def _assert_split_close(y, x, weight, split):
    ref = x.double() @ weight.double().T
    n = x.shape[1] + 2 + split  # the partial sums add split - 1 more fp32 additions
    bound = n * U32 / (1 - n * U32) * (x.double().abs() @ weight.double().abs().T)
    assert y.dtype == x.dtype and y.shape == ref.shape
    assert bool(((y.double() - ref).abs() <= bound).all())


@pytest.mark.parametrize("shape", list(TILES), ids=list(TILES.values()))
def test_every_tile_class_computes_all_three_formats(shape):
    """Each kernel at the tile `tile_for` picks for the shape, against the libraries' weights."""
    from bitsandbytes.functional import quantize_4bit

    from nudgeability.models.quant import BnB4Linear

    rows, n, k = shape
    tile = triton_kernels.tile_for(rows, n, k)
    gen = torch.Generator().manual_seed(rows + n + k)
    x = torch.randn(rows, k, generator=gen)
    # W4A16, asymmetric groups of 32
    q = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
    scale = torch.rand(n, k // 32, generator=gen) + 0.1
    zp = torch.randint(-8, 8, (n, k // 32), generator=gen, dtype=torch.int8)
    packed = pack_to_int32(q, 4)
    weight = dequantize_pack_quantized(packed, scale, 4, k, pack_to_int32(zp, 4, packed_dim=0))
    y = triton_kernels.w4a16_matmul(x, packed, scale, zp, 32, tile)
    _assert_split_close(y, x, weight, tile.SPLIT_K)
    # FP8, 128-blocks (partial on most of these shapes)
    w8, scale_inv = quantize_fp8_block(torch.randn(n, k, generator=gen), (128, 128), torch.float32)
    y = triton_kernels.fp8_matmul(x, w8, scale_inv, (128, 128), tile)
    _assert_split_close(y, x, dequantize_fp8_block(w8, scale_inv, (128, 128)), tile.SPLIT_K)
    # NF4, blocks of 64 (k is a multiple of 64 here, so dequantize_4bit reads it right)
    w4, state = quantize_4bit(torch.randn(n, k, generator=gen), blocksize=64, quant_type="nf4")
    layer = BnB4Linear(w4, state)
    y = triton_kernels.nf4_matmul(x, w4, layer.block_absmax(), state.code, 64, n, tile)
    _assert_split_close(y, x, layer.dequantize(), tile.SPLIT_K)
