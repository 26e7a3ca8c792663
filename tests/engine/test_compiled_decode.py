"""The optional compiled decode step gives the eager engine's tokens and logits."""

from __future__ import annotations

import threading

import pytest
import torch
from helpers.engine_reference import random_ids

from nudgeability.engine import Engine, SamplingParams
from nudgeability.engine.invariant.cpu import cores
from nudgeability.models.testing.tiny import tiny_model


@pytest.mark.slow
def test_compiled_decode_equals_eager_as_arms_finish_at_different_steps(monkeypatch):
    """At two threads, where the eager forward shares its pieces between two cores, the compiled
    one keeps them on the calling thread (`Cores.one_thread`): dynamo traced a piece while the
    other core wrote the step's mask memo, and a clean-clone CI run failed on that race."""
    torch._dynamo.reset()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    submitted = []
    real_in_mode = cores._in_mode

    def spy(*args, **kwargs):  # what another core runs for each job handed to it
        submitted.append(threading.get_ident())
        return real_in_mode(*args, **kwargs)

    # the cores' own hand-over, not every executor: inductor compiles in a thread pool of its own
    monkeypatch.setattr(cores, "_in_mode", spy)
    try:
        model = tiny_model("qwen3", num_layers=1, seed=12)
        prefix = random_ids(90, seed=13)
        suffixes = [random_ids(n, seed=600 + n) for n in (2, 5, 9)]
        params = [SamplingParams(max_new_tokens=n) for n in (4, 16, 9)]  # shrinks twice
        eager = Engine(model).fork(prefix, suffixes, params, return_logits=True)
        assert submitted  # eager: the other core takes jobs
        submitted.clear()
        compiled = Engine(model, compile_decode=True).fork(
            prefix, suffixes, params, return_logits=True
        )
    finally:
        torch.set_num_threads(threads)
    assert not submitted  # compiled: every job on the calling thread
    for a, b in zip(eager, compiled):
        assert a.token_ids == b.token_ids
        assert torch.allclose(a.logits, b.logits, rtol=1e-4, atol=1e-5)
