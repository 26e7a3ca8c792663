"""benchmarks/benchkit/forward_floors.py's fixed-shape attention runs the calls the engine runs: in every decode step of
a real fork, the same shapes of shared-keys and own-keys calls (query rows, keys, bias), the
arms grouped by their own keys' width as the engine groups them, crossing a width mid-fork. On
one thread, as benchmarks/fork_vs_generate.py runs (on more, the engine deals a call's rows to the cores)."""

from __future__ import annotations

from collections import Counter

import torch
from benchkit.forward_floors import AttentionKernels
from helpers.engine_reference import random_ids

import nudgeability.engine.attention.cpu_attention as cpu_attention
from nudgeability.engine import Engine, ForkRequest, SamplingParams
from nudgeability.models.testing.tiny import tiny_model


def _shapes(*tensors) -> tuple:
    return tuple(None if t is None else tuple(t.shape) for t in tensors)


def _steps(model, prefix, lengths, new, calls) -> list[Counter]:
    """The calls recorded in each step of a fork, in step order."""
    engine = Engine(model)
    suffixes = [random_ids(n, seed=n) for n in lengths]
    params = SamplingParams(max_new_tokens=new, ignore_eos=True)
    engine.submit_fork(ForkRequest(prefix, suffixes, params))
    steps = []
    with torch.inference_mode():
        while engine.busy:
            calls.clear()
            engine.step()
            steps.append(Counter(calls))
    return steps


def test_the_fixed_shape_floor_calls_the_engines_decode_shapes(monkeypatch):
    model = tiny_model("llama", num_layers=2)
    prefix, lengths, new = random_ids(300, seed=1), [5, 120, 126, 40], 6
    calls: list = []
    shared, own = cpu_attention.shared_keys_attention, cpu_attention.own_keys_attention

    def record_shared(folded, keys, values, bias, scaling, tile=None):
        calls.append(("shared", _shapes(folded, keys, bias)))
        return shared(folded, keys, values, bias, scaling, tile)

    def record_own(q, keys, values, bias, scaling, tokens=1):
        calls.append(("own", _shapes(q, keys, bias)))
        return own(q, keys, values, bias, scaling, tokens)

    monkeypatch.setattr(cpu_attention, "shared_keys_attention", record_shared)
    monkeypatch.setattr(cpu_attention, "own_keys_attention", record_own)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        steps = _steps(model, prefix, lengths, new, calls)
    finally:
        torch.set_num_threads(threads)
    decode = steps[-(new - 1) :]  # after the prefix's step and the suffixes' step

    kernels = AttentionKernels(model, len(prefix), lengths, new)
    layers = model.config.num_hidden_layers
    widths = set()
    for i, engine_calls in enumerate(decode, start=1):
        floor_calls = Counter(
            {("shared", _shapes(kernels.q_fold[0], kernels.pk_fixed[0], kernels.prefix_bias)): 1}
        )
        for q, keys, _, bias in kernels._own_calls(i):
            floor_calls[("own", _shapes(q, keys[0], bias))] += 1
            widths.add(keys[0].shape[2])
        assert engine_calls == Counter({call: n * layers for call, n in floor_calls.items()}), i
    assert widths == {128, 256}  # the arms at slots 126 and up read a second block
