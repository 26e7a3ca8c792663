"""A one-token chunk of a row whose tokens live in a run (a stem, a trunk, a shared start's rest),
on the fixed-shape decode path forced on CPU (`Engine(static_decode=True)`): the chunk must read
the run it continues. `prefill_tokens` decides where a row's prefill chunks end, so each length
below is 1 more than a multiple of it, and the run's last token is fed alone; every arm is held
to HF's own greedy run of its whole prompt (tests/helpers/engine_reference.py)."""

from __future__ import annotations

import pytest
from helpers.engine_reference import assert_forks_match_reference, random_ids

from nudgeability.engine import Engine, ForkRequest, SamplingParams
from nudgeability.models.testing.tiny import tiny_model

ARM = SamplingParams(max_new_tokens=6)
PROMPT = random_ids(13, seed=21)
TRUNK = PROMPT[-1:] + random_ids(8, seed=22)  # a base's last prompt token and 8 more


def _forks() -> list[ForkRequest]:
    """A fork with a 5-token stem; two forks cut at 5 and 9 tokens into one 9-token trunk (the second reads its last token); a
    fork whose 9 prompt tokens after a shared start of 4 are computed by a row of their own."""
    arms = [random_ids(3, seed=23), random_ids(1, seed=24)]
    trunk = [
        ForkRequest(PROMPT + TRUNK[1:stem], arms, ARM, stem=stem, trunk=9, trunk_ids=TRUNK)
        for stem in (5, 9)
    ]
    return [
        ForkRequest(PROMPT + TRUNK[1:5], arms, ARM, stem=5),
        *trunk,
        ForkRequest(PROMPT, arms, ARM, shared=4),
    ]


@pytest.fixture(scope="module")
def model():
    return tiny_model("qwen3", seed=3)


@pytest.mark.parametrize("prefill_tokens", [1, 4])
def test_a_run_whose_last_chunk_is_one_token_is_read_by_that_token(model, prefill_tokens):
    engine = Engine(model, static_decode=True, prefill_tokens=prefill_tokens)
    requests = _forks()
    results = engine.fork_many(requests, return_logits=True)
    assert engine.stats.static_steps > 0
    assert_forks_match_reference(model, engine, requests, results)


def test_one_token_run_chunks_under_preemption(model):
    """A KV budget too small for every fork's arms at once: arms are preempted and recompute
    their context (their last chunk one token) while stems and trunks are written."""
    engine = Engine(model, static_decode=True, prefill_tokens=4, max_batch_tokens=36, block_size=4)
    requests = _forks()
    results = engine.fork_many(requests, return_logits=True)
    assert engine.stats.preemptions > 0 and engine.stats.static_steps > 0
    assert_forks_match_reference(model, engine, requests, results)
