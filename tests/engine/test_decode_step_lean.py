"""A step reads the device once, sends the host's decisions in one copy, issues no more work than
HF's own decode step plus the cascade's own operations, and never moves the KV pool."""

from __future__ import annotations

import pytest
import torch
from benchkit.profile import engine_step_ops, hf_step_ops
from helpers.engine_reference import random_ids

from nudgeability.engine import Engine, ForkRequest, SamplingParams
from nudgeability.models.testing.tiny import tiny_model


@pytest.mark.parametrize("arch", ["llama", "gemma4"])
def test_every_step_that_chooses_tokens_reads_the_device_exactly_once(arch, host_reads):
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
    # the prefix's step chooses nothing; then the suffixes' step and 8 decode steps
    assert [dict(c) for c in host_reads] == [{}] + [{"tolist": 1}] * 9


def test_a_step_sends_its_inputs_to_the_device_in_one_copy(monkeypatch):
    """Everything the host decides for a step (ids, positions, slots, gathers, sampling rows)
    travels in one tensor: on a GPU, one transfer before the forward instead of one per list."""
    import nudgeability.engine.scheduling.step_layout as layout_module

    made = []
    original = torch.tensor

    def counting(data, *args, **kwargs):
        if isinstance(data, list) and inside:
            made.append(len(data))
        return original(data, *args, **kwargs)

    inside = []
    build = layout_module.StepLayout.of.__func__

    def of(cls, *args, **kwargs):
        inside.append(True)
        try:
            return build(cls, *args, **kwargs)
        finally:
            inside.pop()

    monkeypatch.setattr(layout_module.torch, "tensor", counting)
    monkeypatch.setattr(layout_module.StepLayout, "of", classmethod(of))
    engine = Engine(tiny_model("qwen3", num_layers=2, seed=3))
    engine.fork(
        random_ids(40, seed=2),
        [random_ids(n, seed=n) for n in (2, 5)],
        SamplingParams(max_new_tokens=5),
    )
    assert engine.stats.steps == len(made) == 6  # prefix, suffixes, 4 decode steps


def _tiny_ops(layers: int):
    """Counted on one core: on several, the fixed-shape calls are shared between threads
    (engine/invariant/cpu/cores.Cores) and each shared attention call adds the `cat` of its parts."""
    model = tiny_model("llama", num_layers=layers)
    prefix = random_ids(150, seed=2)
    suffixes = [random_ids(n, seed=10 + n) for n in (3, 7, 12, 5)]
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        engine = engine_step_ops(Engine(model), prefix, suffixes, params)
        hf = hf_step_ops(model, prefix, suffixes)
    finally:
        torch.set_num_threads(threads)
    return engine, hf


def test_decode_step_work_is_hf_step_plus_the_cascade_per_layer():
    """HF's step on a DynamicCache already expanded to the arms is the reference. Per layer the
    cascade may add 16 operations, each named: a second attention call (1); the gathers of the
    queries into the per-token layout and of each row's keys and values from its blocks (3); the
    copies that lay them out for the fixed-shape kernel calls (4: engine/attention/
    engine/invariant/cpu/attention.py); the padding of the folded queries to 16-row tiles and of the prefix keys
    and values to 512-key blocks (3); the merge (difference of log-sum-exps, its padding onto
    whole vector lanes, sigmoid, lerp: 4); and the padding of the output to the step's pad rows
    (1). HF's two KV `cat`s are the engine's two KV writes."""
    (e2, h2), (e4, h4) = _tiny_ops(2), _tiny_ops(4)
    per_layer_engine = (e4.work - e2.work) / 2
    per_layer_hf = (h4.work - h2.work) / 2
    assert per_layer_engine <= per_layer_hf + 16
    fixed_engine, fixed_hf = e2.work - 2 * per_layer_engine, h2.work - 2 * per_layer_hf
    assert fixed_engine <= fixed_hf + 2  # inputs (one copy, then split), LM head and choice
    assert e2.host_reads == e4.host_reads == 0  # no .item()/bool(): the one read is .tolist()


def test_the_kv_pool_never_moves_or_grows_while_work_runs():
    """KV is written into one pool allocated before the first step: every step writes into the
    same storage, whatever the rows do (none is concatenated or reallocated)."""
    model = tiny_model("llama", num_layers=2, seed=6)
    engine = Engine(model)
    refs = engine.submit_fork(
        ForkRequest(
            random_ids(50, seed=7),
            [random_ids(n, seed=n) for n in (5, 2, 8)],
            SamplingParams(max_new_tokens=14, ignore_eos=True),
        )
    )
    storage = []
    while engine.busy:
        engine.step()
        tensors = [t for t in engine.pool.k + engine.pool.v if t is not None]
        storage.append([(t.data_ptr(), t.untyped_storage().nbytes()) for t in tensors])
    assert len(refs) == 3 and len(storage) == 15 and all(s == storage[0] for s in storage)
