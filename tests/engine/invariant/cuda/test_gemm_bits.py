"""A row's bits, alone and among M - 1 others, from every batch-invariant Triton GEMM
(engine/invariant/cuda/products.py) under the interpreter with a GPU-like dot
(tests/helpers/triton_dot.py), in fp32 and fp16; and the negative controls: the same kernels at a
tile that follows the batch (`triton_kernels.tile_for`'s BLOCK_M, a K split chosen by M) fail the
very same assertion."""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 set before triton is imported", allow_module_level=True)
pytest.importorskip("triton")

from helpers.triton_dot import assert_rows_alone, shape_dependent_dot  # noqa: E402

from nudgeability.engine.invariant.cuda import products  # noqa: E402
from nudgeability.engine.invariant.cuda.plan import plan  # noqa: E402
from nudgeability.models.quant import cuda_kernels, triton_kernels  # noqa: E402
from nudgeability.models.quant.triton_kernels import Tile, columns  # noqa: E402

N, K = 80, 256  # two column tiles (one partial), four K slices: the plan splits K in two
QUANT_SIZES = (1, 16, 17, 63, 64, 65, 257)  # the 16/32/64-row thresholds and a few row tiles


@pytest.fixture(autouse=True)
def _gpu_like_dot(monkeypatch):
    shape_dependent_dot(monkeypatch)


def _weight(dtype):
    gen = torch.Generator().manual_seed(7)
    return (torch.randn(N, K, generator=gen) / 16).to(dtype)


def test_the_plan_splits_this_shape():
    """The shape the tests use reaches the K split (so its fixed order is tested too)."""
    assert plan(N, K) == Tile(64, 64, 64, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_dense_row_is_bitwise_its_run_alone(dtype):
    weight = _weight(dtype)
    assert_rows_alone(lambda x: products.linear(x, weight), K, dtype=dtype)


def test_dense_bias_and_leading_dims():
    weight, bias = _weight(torch.float32), torch.randn(N)
    x = torch.randn(2, 3, K)
    y = products.linear(x, weight, bias)
    assert y.shape == (2, 3, N)
    assert torch.equal(y[1, 2], products.linear(x[1, 2:3], weight, bias)[0])


def test_control_block_m_from_the_rows_fails():
    weight = _weight(torch.float32)

    def by_rows(x):
        return triton_kernels.dense_matmul(x, weight, triton_kernels.tile_for(x.shape[0], N, K))

    with pytest.raises(AssertionError, match="differs from its run alone"):
        assert_rows_alone(by_rows, K)


def test_control_split_from_the_rows_fails():
    """BLOCK_M fixed, but the K split chosen by the rows, as flash's heuristic does."""
    weight = _weight(torch.float32)

    def split_by_rows(x):
        tile = Tile(64, 64, 64, 1 if x.shape[0] <= 16 else 2)
        return triton_kernels.dense_matmul(x, weight, tile)

    with pytest.raises(AssertionError, match="differs from its run alone"):
        assert_rows_alone(split_by_rows, K)


@pytest.fixture(scope="module")
def layers():
    """One layer of each quantised format on CPU tensors (tests/helpers/quant_layers.py)."""
    pytest.importorskip("bitsandbytes")
    from helpers.quant_layers import bnb4_layer, fp8_layer, w4a16_layer

    built = {"w4a16": w4a16_layer(N, K), "fp8": fp8_layer(N, K), "bnb4": bnb4_layer(N, K)}
    return {fmt: layer for fmt, (layer, _) in built.items()}


@pytest.mark.parametrize("fmt", ["w4a16", "fp8", "bnb4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_quantised_row_is_bitwise_its_run_alone(layers, fmt, dtype):
    layer = layers[fmt]
    assert_rows_alone(lambda x: products.quantised(layer, x), K, QUANT_SIZES, dtype)
    name = {"w4a16": "triton_w4a16", "fp8": "triton_fp8", "bnb4": "triton_4bit"}[fmt]
    assert layer.invariant_kernel == f"{name}[{plan(N, K).name}]"


@pytest.mark.parametrize("fmt", ["w4a16", "fp8", "bnb4"])
def test_control_quantised_kernel_at_tile_for_fails(layers, fmt):
    """The kernels as the non-invariant CUDA paths launch them (cuda_kernels.py `_triton_kernel`)."""
    _, call = cuda_kernels.triton_call(layers[fmt])

    def by_rows(x):
        return call(x, triton_kernels.tile_for(x.shape[0], N, K))

    with pytest.raises(AssertionError, match="differs from its run alone"):
        assert_rows_alone(by_rows, K, QUANT_SIZES)


def test_columns_are_the_non_invariant_tiles_own():
    """One rule for BLOCK_N and the split: the plan differs from `tile_for` in BLOCK_M only."""
    for n, k in [(N, K), (1024, 2048), (151936, 1024), (3072, 1024)]:
        tile = plan(n, k)
        assert (tile.BLOCK_N, tile.BLOCK_K, tile.SPLIT_K) == columns(n, k)
