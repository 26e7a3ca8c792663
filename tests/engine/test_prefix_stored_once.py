"""N arms hold one physical copy of the prefix KV per layer, whatever N is."""

from __future__ import annotations

import pytest
from helpers.engine_reference import random_ids

import nudgeability.engine.engine as engine_module
from nudgeability.engine import Engine, ForkRequest, SamplingParams
from nudgeability.engine.attention_layout import ArmStep
from nudgeability.engine.fork_cache import ForkCache
from nudgeability.models.testing.tiny import tiny_model


@pytest.fixture
def caches(monkeypatch):
    """Record every ForkCache the engine builds, and every prefix tensor's data pointer at each step."""
    made = []

    class RecordingCache(ForkCache):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.pointers_per_step = []
            made.append(self)

        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            out = super().update(key_states, value_states, layer_idx, *args, **kwargs)
            if isinstance(self.ctx, ArmStep) and layer_idx == 0:
                self.pointers_per_step.append([t.data_ptr() for t in self.prefix_tensors()])
            return out

    monkeypatch.setattr(engine_module, "ForkCache", RecordingCache)
    return made


def _expected_prefix_bytes(model, cache, prefix_len: int, groups: int = 1) -> int:
    total = 0
    for window, layer in zip(cache.windows, cache.storage):
        if layer.prefix_k is None:
            continue  # a KV-shared layer stores nothing
        kv, d = layer.prefix_k.shape[1], layer.prefix_k.shape[3]
        kept = prefix_len if window is None else min(window - 1, prefix_len)
        total += 2 * groups * kv * kept * d * layer.prefix_k.element_size()
    return total


@pytest.mark.parametrize("arch", ["llama", "gemma4"])
def test_prefix_bytes_do_not_grow_with_the_number_of_arms(arch, caches):
    model = tiny_model(arch)
    engine = Engine(model)
    prefix = random_ids(240, seed=1)
    sizes = {}
    for n in (1, 8, 32):
        engine.fork(
            prefix,
            [random_ids(1 + i % 7, seed=i) for i in range(n)],
            SamplingParams(max_new_tokens=4),
        )
        cache = caches[-1]
        sizes[n] = cache.nbytes()
        assert sizes[n]["prefix"] == _expected_prefix_bytes(model, cache, len(prefix))
        for layer in cache.storage:
            if layer.prefix_k is not None:
                assert layer.prefix_k.shape[0] == 1  # one group, not one per arm
                assert (
                    layer.prefix_k.untyped_storage().nbytes()
                    == layer.prefix_k.numel() * layer.prefix_k.element_size()
                )
    assert sizes[1]["prefix"] == sizes[8]["prefix"] == sizes[32]["prefix"]
    assert sizes[1]["suffix"] < sizes[8]["suffix"] < sizes[32]["suffix"]


def test_sliding_layers_keep_only_the_last_window_minus_one_positions(caches):
    model = tiny_model("gemma4")
    engine = Engine(model)
    engine.fork(random_ids(100, seed=2), [random_ids(3, seed=3)], SamplingParams(max_new_tokens=2))
    cache = caches[-1]
    kept = {
        w: layer.prefix_k.shape[2]
        for w, layer in zip(cache.windows, cache.storage)
        if layer.prefix_k is not None
    }
    assert kept == {None: 100, 16: 15}


def test_every_decode_step_reads_the_same_prefix_storage(caches):
    engine = Engine(tiny_model("qwen3"))
    engine.fork(
        random_ids(220, seed=4),
        [random_ids(n, seed=n) for n in (1, 4, 9)],
        SamplingParams(max_new_tokens=12),
    )
    steps = caches[-1].pointers_per_step
    assert len(steps) >= 2 and all(s == steps[0] for s in steps)


def test_two_groups_store_two_prefixes_not_one_per_arm(caches):
    model = tiny_model("glm4")
    engine = Engine(model)
    requests = [
        ForkRequest(
            random_ids(200, seed=5), [random_ids(2, seed=6)] * 6, SamplingParams(max_new_tokens=3)
        ),
        ForkRequest(
            random_ids(200, seed=7), [random_ids(3, seed=8)] * 6, SamplingParams(max_new_tokens=3)
        ),
    ]
    engine.fork_many(requests)
    cache = caches[-1]
    assert cache.nbytes()["prefix"] == _expected_prefix_bytes(model, cache, 200, groups=2)
