"""The optional compiled decode step gives the eager engine's tokens and logits."""

from __future__ import annotations

import pytest
import torch
from helpers.engine_reference import random_ids

from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.testing.tiny import tiny_model


@pytest.mark.slow
def test_compiled_decode_equals_eager_as_arms_finish_at_different_steps():
    torch._dynamo.reset()
    model = tiny_model("qwen3", num_layers=1, seed=12)
    prefix = random_ids(90, seed=13)
    suffixes = [random_ids(n, seed=600 + n) for n in (2, 5, 9)]
    params = [SamplingParams(max_new_tokens=n) for n in (4, 16, 9)]  # the running set shrinks twice
    eager = Engine(model).fork(prefix, suffixes, params, return_logits=True)
    compiled = Engine(model, compile_decode=True).fork(prefix, suffixes, params, return_logits=True)
    for a, b in zip(eager, compiled):
        assert a.token_ids == b.token_ids
        assert torch.allclose(a.logits, b.logits, rtol=1e-4, atol=1e-5)
