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
    """A fork with a 5-token stem; two forks cut at 5 and 9 tokens into one 9-token trunk (the
    second reads its last token); a fork whose 9 prompt tokens after a shared start of 4 are
    computed by a row of their own. 5 and 9 are 1 more than a multiple of 1 and of 4."""
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


@pytest.mark.parametrize("prefill_tokens, kv_budget", [(1, None), (4, 36)])
def test_a_run_whose_last_chunk_is_one_token_is_read_by_that_token(
    model, prefill_tokens, kv_budget
):
    """`kv_budget` 36 slots cannot hold every fork's arms at once: arms are preempted, and
    recompute their context, while stems and trunks are written and read."""
    kwargs = {} if kv_budget is None else {"max_batch_tokens": kv_budget, "block_size": 4}
    engine = Engine(model, static_decode=True, prefill_tokens=prefill_tokens, **kwargs)
    requests = _forks()
    results = engine.fork_many(requests, return_logits=True)
    assert engine.stats.static_steps > 0
    assert (engine.stats.preemptions > 0) == (kv_budget is not None)
    assert_forks_match_reference(model, engine, requests, results)
