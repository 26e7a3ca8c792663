"""The batch-invariant GEMMs' launch plan (engine/invariant/cuda/plan.py), without running a
kernel: the tile every product is launched at, for every M and whatever the device says it is;
and where a run decides to use them (engine/model_runner.py `invariance_of`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from helpers.triton_dot import SWEEP

from nudgeability.engine.invariant.cuda import products
from nudgeability.engine.invariant.cuda.plan import BLOCK_M, plan
from nudgeability.engine.model_runner import invariance_of
from nudgeability.models.quant import triton_kernels

# Qwen3-0.6B's products (q, k/v, o, gate/up, down, the LM head) and the tiny test shapes
SHAPES = [(2048, 1024), (1024, 1024), (1024, 2048), (3072, 1024), (1024, 3072), (151936, 1024)]
SHAPES += [(80, 256), (64, 64), (320, 64)]
PREFILL = (1024, 2048)  # the rows of a prefill chunk, beyond the decode sweep


def _launched(monkeypatch, shape) -> set:
    """The tiles `products.linear` launched the dense kernel at, for every M of the sweep and a
    prefill chunk; the kernel itself is not run (a zero result of the right shape)."""
    tiles = set()

    def record(x, weight, tile=None):
        tiles.add(tile)
        return x.new_zeros(x.shape[0], weight.shape[0])

    monkeypatch.setattr(triton_kernels, "dense_matmul", record)
    weight = torch.empty(*shape)
    for m in SWEEP + PREFILL:
        products.linear(torch.empty(m, shape[1]), weight)
    return tiles


@pytest.mark.parametrize("shape", SHAPES)
def test_one_tile_for_every_row_count(monkeypatch, shape):
    assert _launched(monkeypatch, shape) == {plan(*shape)}
    assert plan(*shape).BLOCK_M == BLOCK_M == 64


@pytest.mark.parametrize("sms,capability", [(114, (8, 0)), (132, (9, 0)), (78, (9, 0))])
def test_the_device_decides_nothing(monkeypatch, sms, capability):
    """An A100-, H100- or other-sized GPU, as far as torch can tell anyone who asks."""
    props = SimpleNamespace(
        multi_processor_count=sms, major=capability[0], minor=capability[1], name="mock"
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a, **k: props)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: capability)
    for shape in SHAPES:
        assert _launched(monkeypatch, shape) == {plan(*shape)}
        assert plan(*shape) == _PLANS[shape]


# the plans with no device mocked, for the test above to compare with
_PLANS = {shape: plan(*shape) for shape in SHAPES}


def test_the_split_keeps_decode_busy_and_never_exceeds_eight():
    """The LM head is wide enough not to split; a 1024-column product over K 3072 is split."""
    assert plan(151936, 1024).SPLIT_K == 1 and plan(151936, 1024).BLOCK_N == 128
    assert plan(1024, 3072).SPLIT_K > 1
    assert all(1 <= plan(*shape).SPLIT_K <= 8 for shape in SHAPES)


def test_which_products_a_run_computes_with():
    assert invariance_of(True, "cpu", None) == "cpu"
    assert invariance_of(True, "cuda", None) is None  # CUDA's default is unchanged
    assert invariance_of(False, "cpu", None) is None
    assert invariance_of(True, "cuda", "triton") == "triton"
    assert invariance_of(True, "cpu", "triton") == "triton"  # the CUDA branch on CPU tensors
    with pytest.raises(ValueError, match="needs batch_invariant=True"):
        invariance_of(False, "cuda", "triton")
    with pytest.raises(ValueError, match="is not one of"):
        invariance_of(True, "cuda", "cublas")
