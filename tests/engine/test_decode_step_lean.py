"""A decode step reads the device once, issues no more work than HF's own step plus the cascade
merge, and with static shapes repeats exactly the same operations on the same shapes."""

from __future__ import annotations

import collections

import pytest
import torch
from helpers.engine_reference import assert_matches_reference, random_ids
from torch.profiler import ProfilerActivity, profile

from nudgeability.engine import Engine, SamplingParams
from nudgeability.engine.profile import engine_step_ops, hf_step_ops
from nudgeability.models.testing.tiny import tiny_model

# every way Python code can read a tensor's value on the host
HOST_READS = ("tolist", "item", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy")


@pytest.fixture
def host_reads(monkeypatch):
    """Counts of host reads made inside each `Engine.step` (one list per step)."""
    per_step: list[collections.Counter] = []
    inside = []

    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            if inside:
                per_step[-1][_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)

    step = Engine.step

    def counted_step(self, batch, cache):
        per_step.append(collections.Counter())
        inside.append(True)
        try:
            step(self, batch, cache)
        finally:
            inside.pop()

    monkeypatch.setattr(Engine, "step", counted_step)
    return per_step


@pytest.mark.parametrize("arch", ["llama", "gemma4"])
def test_every_decode_step_reads_the_device_exactly_once(arch, host_reads):
    engine = Engine(tiny_model(arch, num_layers=2, seed=3))
    prefix = random_ids(60, seed=1)
    suffixes = [random_ids(n, seed=n) for n in (3, 0, 7, 2)]
    # greedy and sampled rows together; budgets make rows leave the batch at different steps
    params = [
        SamplingParams(max_new_tokens=9, ignore_eos=True),
        SamplingParams(max_new_tokens=4, temperature=1.0, seed_key=(0, "p", "x"), ignore_eos=True),
        SamplingParams(max_new_tokens=6, ignore_eos=True),
        SamplingParams(max_new_tokens=9, temperature=0.7, seed_key=(1, "p", "y"), ignore_eos=True),
    ]
    engine.fork(prefix, suffixes, params)
    assert len(host_reads) == 8  # steps 2..9 of the longest arm
    assert [dict(c) for c in host_reads] == [{"tolist": 1}] * 8


def _tiny_ops(layers: int):
    model = tiny_model("llama", num_layers=layers)
    prefix = random_ids(150, seed=2)
    suffixes = [random_ids(n, seed=10 + n) for n in (3, 7, 12, 5)]
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    engine = engine_step_ops(Engine(model), prefix, suffixes, params)
    hf = hf_step_ops(model, prefix, suffixes)
    return engine, hf


def test_decode_step_work_is_hf_step_plus_the_merge_per_layer():
    """HF's step on a DynamicCache already expanded to the arms is the reference. Per layer the
    cascade attention may add: a second attention call, the merge (difference of log-sum-exps,
    sigmoid, lerp) and the copy that folds the arms into query rows: 5 operations."""
    (e2, h2), (e4, h4) = _tiny_ops(2), _tiny_ops(4)
    per_layer_engine = (e4.work - e2.work) / 2
    per_layer_hf = (h4.work - h2.work) / 2
    assert per_layer_engine <= per_layer_hf + 5
    fixed_engine, fixed_hf = e2.work - 2 * per_layer_engine, h2.work - 2 * per_layer_hf
    assert fixed_engine <= fixed_hf  # inputs, masks, LM head and choice: no more than HF's
    assert e2.host_reads == e4.host_reads == 0  # no .item()/bool(): the one read is .tolist()


def test_static_shapes_repeat_the_same_operations_on_the_same_shapes_and_change_no_token():
    model = tiny_model("gemma4", num_layers=4, seed=4)
    prefix = random_ids(40, seed=5)
    suffixes = [random_ids(n, seed=n) for n in (4, 9, 2)]
    engine = Engine(model, static_shapes=True)
    shapes_per_step = []
    step = Engine.step

    def recorded(batch, cache):
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            step(engine, batch, cache)
        shapes_per_step.append(
            collections.Counter(
                (e.name, str(e.input_shapes)) for e in prof.events() if e.name.startswith("aten::")
            )
        )

    engine.step = recorded
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    arms = engine.fork(prefix, suffixes, params, return_logits=True)
    assert len(shapes_per_step) == 11
    assert all(s == shapes_per_step[1] for s in shapes_per_step[1:])
    for suffix, arm in zip(suffixes, arms):
        assert_matches_reference(model, arm, prefix + suffix, 12, engine.eos_ids)


@pytest.mark.parametrize("static_shapes", [True, False])
def test_no_allocation_grows_with_the_step_count(static_shapes):
    """The KV cache is allocated once: every decode step writes into the same storage. With
    static shapes the bytes a step allocates (profiler memory events) are the same at every step;
    without, a step reads slots [0, hw), so its masks grow by the same few bytes per step: less
    than the K/V of one slot, which a cache that grew (`torch.cat`) would allocate every step."""
    model = tiny_model("llama", num_layers=2, seed=6)
    prefix = random_ids(50, seed=7)
    suffixes = [random_ids(n, seed=n) for n in (5, 2, 8)]
    engine = Engine(model, static_shapes=static_shapes)
    storage, allocated, slot_bytes = [], [], []
    step = Engine.step

    def recorded(batch, cache):
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step(engine, batch, cache)
        allocated.append(sum(max(e.cpu_memory_usage, 0) for e in prof.events()))
        tensors = cache.prefix_tensors() + cache.suffix_tensors()
        storage.append([(t.data_ptr(), t.untyped_storage().nbytes()) for t in tensors])
        slot_bytes.append(sum(t.nbytes // t.shape[2] for t in cache.suffix_tensors()))

    engine.step = recorded
    engine.fork(prefix, suffixes, SamplingParams(max_new_tokens=14, ignore_eos=True))
    assert len(storage) == 13 and all(s == storage[0] for s in storage)
    growth = {b - a for a, b in zip(allocated[1:], allocated[2:])}
    if static_shapes:
        assert growth == {0}, allocated
    else:
        assert len(growth) == 1 and 0 < growth.pop() < slot_bytes[0], allocated
