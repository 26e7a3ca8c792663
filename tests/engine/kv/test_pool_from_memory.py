"""The KV pool on CUDA is sized from free device memory (engine/kv/kv_pool.py `pool_blocks_for`,
wired in `Engine.__init__`): checked on CPU with `torch.cuda.mem_get_info` faked and the
engine's device test (`sizes_pool_from_memory`) pointed at the CPU, against hand computations."""

from __future__ import annotations

import weakref
from types import SimpleNamespace

import pytest
import torch
from helpers.engine_reference import random_ids
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from nudgeability.engine import Engine, EngineInputError, SamplingParams
from nudgeability.engine import engine as engine_module
from nudgeability.engine.kv.kv_pool import pool_blocks_for, step_margin_bytes
from nudgeability.engine.kv.reservation import check_margin_bytes, memory_pool
from nudgeability.models.quant.compute import FusedPath
from nudgeability.models.quant.fp8_linear import FP8BlockLinear, quantize_fp8_block
from nudgeability.models.quant.self_check import Kernel, disagreement
from nudgeability.models.testing.tiny import tiny_model

MiB = 2**20


def test_pool_blocks_for_by_hand():
    # 0.9 of 10 GiB, less 1 MiB, in blocks of 16 slots of 1,024 bytes
    assert pool_blocks_for(10 * 2**30, 1024, 16, 0.9, MiB) == (9663676416 - MiB) // 16384
    assert pool_blocks_for(10 * 2**30, 1024, 16, 0.5, 0) == 5 * 2**30 // 16384
    with pytest.raises(ValueError, match="KV blocks"):
        pool_blocks_for(MiB, 1024, 16, 0.9, MiB)
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        pool_blocks_for(10 * 2**30, 1024, 16, 1.5, 0)


def test_step_margin_by_hand():
    # per token (6 x 64 + 4 x 128) x 4 bytes, per row 320 x (4 + 8), doubled
    assert step_margin_bytes(64, 128, 320, 2048, 256, 4) == 2 * (2048 * 896 * 4 + 256 * 320 * 12)


@pytest.fixture
def fake_cuda(monkeypatch):
    """The engine takes the CUDA sizing path on CPU, with `free` bytes free; records calls."""
    calls = []

    def mem_get_info(device=None):
        calls.append(device)
        return fake_cuda.free, 80 * 2**30

    monkeypatch.setattr(engine_module, "sizes_pool_from_memory", lambda device: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    fake_cuda.free = 64 * MiB
    fake_cuda.calls = calls
    return fake_cuda


def test_engine_sizes_and_allocates_its_pool_from_free_memory(fake_cuda):
    model = tiny_model("qwen3", num_layers=4)  # fp32: 4 layers x K and V x 2 heads x 16 x 4 bytes
    engine = Engine(model)
    slot = 4 * 2 * 2 * 16 * 4
    # no max_rows: the LM head's rows are the largest decode bucket's, 512 (the rows a CUDA run
    # may hand the engine later, splice/run/device_batching.py)
    margin = 2 * (2048 * (6 * 64 + 4 * 128) * 4 + 512 * 320 * (4 + 8))
    blocks = (int(0.9 * 64 * MiB) - margin) // (slot * 16)
    assert fake_cuda.calls, "mem_get_info was never asked"
    assert engine.pool.num_blocks == blocks
    assert engine.max_batch_tokens == (blocks - 3) * 16  # a budget: the pool never grows
    for layer in range(4):  # allocated up front, before any step
        assert engine.pool.k[layer].shape == (2, blocks * 16, 16)
        assert engine.pool.v[layer].shape == (2, blocks * 16, 16)
    before = engine.pool.k[0]
    prompts = [random_ids(30 + i, seed=i) for i in range(6)]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=5))
    assert engine.pool.num_blocks == blocks and engine.pool.k[0] is before
    alone = Engine(model, max_batch_tokens=4096)  # an explicit budget: no memory asked
    asked = len(fake_cuda.calls)
    assert [o.token_ids for o in outs] == [
        alone.generate([p], SamplingParams(max_new_tokens=5))[0].token_ids for p in prompts
    ]
    assert len(fake_cuda.calls) == asked


def test_gpu_memory_utilization_overrides_the_fraction(fake_cuda):
    model = tiny_model("qwen3", num_layers=4)
    engine = Engine(model, gpu_memory_utilization=0.5, max_rows=8, prefill_tokens=512)
    slot = 4 * 2 * 2 * 16 * 4
    margin = 2 * (512 * (6 * 64 + 4 * 128) * 4 + 8 * 320 * (4 + 8))
    assert engine.pool.num_blocks == (int(0.5 * 64 * MiB) - margin) // (slot * 16)


def test_explicit_budget_wins_and_too_little_memory_says_so(fake_cuda):
    model = tiny_model("qwen3", num_layers=4)
    engine = Engine(model, max_batch_tokens=1000)
    assert engine.pool.num_blocks == -(-1000 // 16) + 3 and not fake_cuda.calls
    fake_cuda.free = 8 * MiB  # less than the activation margin
    with pytest.raises(EngineInputError, match="KV blocks"):
        Engine(model)


def test_gemma4_pool_takes_its_layers_own_shapes(fake_cuda):
    """Gemma 4: full layers have head size 32, the last two layers store nothing (KV-shared)."""
    model = tiny_model("gemma4", num_layers=6)
    engine = Engine(model)
    k = engine.pool.k
    assert [None if t is None else tuple(t.shape[::2]) for t in k] == [
        (2, 16), (2, 16), (2, 32), (2, 16), None, None
    ]  # fmt: skip
    engine.generate([random_ids(40, seed=1)], SamplingParams(max_new_tokens=3))
    assert engine.pool.k[2] is k[2]


class _PeakBytes(TorchDispatchMode):
    """The most bytes the ops run under it hold at once in storages they made: a storage counts
    once however many tensors view it, until the last of them goes."""

    def __init__(self):
        super().__init__()
        self.views: dict[int, list[int]] = {}  # storage address -> [bytes, tensors alive]
        self.live = self.peak = 0

    def _free(self, key: int) -> None:
        self.views[key][1] -= 1
        if not self.views[key][1]:
            self.live -= self.views.pop(key)[0]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.numel():
                key = t.untyped_storage().data_ptr()
                if key not in self.views:
                    self.views[key] = [t.untyped_storage().nbytes(), 0]
                    self.live += self.views[key][0]
                    self.peak = max(self.peak, self.live)
                self.views[key][1] += 1
                weakref.finalize(t, self._free, key)
        return out


@pytest.mark.parametrize("rows", [16, 300])
def test_the_check_margin_holds_what_the_quantised_self_check_allocates(rows):
    """`reservation.check_margin_bytes` against the self-check itself (models/quant/self_check.py
    `disagreement`, float64 throughout), measured op by op on a layer of [96, 128]: within the
    margin, and the margin not over twice what it takes (the exact weight it also counts, in
    the model dtype, is the caller's here)."""
    n, k = 96, 128
    decoder = torch.nn.Sequential(torch.nn.Linear(k, n))
    assert check_margin_bytes(decoder, rows, 4) == 0  # nothing quantised: nothing checked
    layer = FP8BlockLinear(
        *quantize_fp8_block(torch.randn(n, k), (32, 32), torch.float32), (32, 32)
    )
    layer.fused = FusedPath("a fused kernel", lambda x: x)
    decoder.append(layer)
    weight = layer.dequantize(torch.float32)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(1))
    y = x @ weight.T
    with _PeakBytes() as measured:
        assert disagreement(Kernel("exact", lambda x: x @ weight.T), x, y, weight) is None
    margin = check_margin_bytes(decoder, rows, 4)
    assert measured.peak <= margin - n * k * 4 and margin <= 2 * measured.peak + n * k * 4


def test_the_pool_leaves_room_for_the_graphs_and_the_checks(fake_cuda):
    """With graphs on, the largest bucket's captured step (forward and LM head, in the graphs'
    own memory pool) is counted beside the eager step; a quantised layer on a fused path adds
    its self-check's temporaries at the largest rows a step takes."""
    model = tiny_model("qwen3", num_layers=4)
    runner = Engine(model, max_batch_tokens=64).runner
    args = dict(vocab_size=320, prefill_tokens=512, rows=64, block_size=16, fraction=0.9)
    plain, _ = memory_pool(runner, **args)
    graphed, _ = memory_pool(runner, **args, decode=SimpleNamespace(graphs=1, buckets=(16, 64)))
    slot, eager = 4 * 2 * 2 * 16 * 4, 2 * (512 * (6 * 64 + 4 * 128) * 4 + 64 * 320 * 12)
    graph = 2 * (64 * (6 * 64 + 4 * 128) * 4 + 64 * 320 * 12)  # 64 tokens, 64 rows of logits
    assert plain == (int(0.9 * 64 * MiB) - eager) // (slot * 16)
    assert graphed == (int(0.9 * 64 * MiB) - eager - graph) // (slot * 16)
    mlp = runner.decoder.layers[0].mlp
    mlp.down_proj = FP8BlockLinear(*quantize_fp8_block(mlp.down_proj.weight, (32, 32)), (32, 32))
    mlp.down_proj.fused = FusedPath("a fused kernel", lambda x: x)
    checked, _ = memory_pool(runner, **args)
    check = check_margin_bytes(runner.decoder, 512, 4)
    assert check > 0 and checked == (int(0.9 * 64 * MiB) - eager - check) // (slot * 16)
