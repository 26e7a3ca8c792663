"""An arm's suffix log-probabilities (`SamplingParams.score_suffix`) equal an HF teacher-forced
forward of prefix + suffix, however the prefix reached the arm (prefilled, borrowed, a stem
computed or copied, a shared start, in chunks); scoring changes no token."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from helpers.engine_reference import random_ids

from nudgeability.engine import Engine, ForkRequest, SamplingParams

SCORE = SamplingParams(max_new_tokens=4, score_suffix=True)


def hf_suffix_logprobs(model, prefix: list[int], suffix: list[int]) -> list[float]:
    """log p(suffix[j] | prefix + suffix[:j]) from one HF forward of the whole sequence."""
    ids = torch.tensor([prefix + suffix])
    with torch.inference_mode():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
    return [logp[len(prefix) + j - 1, t].item() for j, t in enumerate(suffix)]


def assert_scores(model, request: ForkRequest, arms) -> None:
    for suffix, arm in zip(request.suffixes, arms):
        want = hf_suffix_logprobs(model, request.prefix_ids, suffix)
        assert len(arm.suffix_logprobs) == len(suffix)
        assert arm.suffix_logprobs == pytest.approx(want, abs=1e-4)


@pytest.mark.parametrize("with_empty", [False, True], ids=["prefix-last", "borrowed"])
def test_arm_suffix_logprobs_equal_an_hf_teacher_forced_forward(tiny, with_empty):
    _, model = tiny
    suffixes = [random_ids(n, seed=40 + n) for n in (1, 3, 7)] + ([[]] if with_empty else [])
    request = ForkRequest(random_ids(150, seed=3), suffixes, SCORE)
    arms = Engine(model).fork_many([request])[0]
    assert_scores(model, request, arms)
    if with_empty:
        assert arms[-1].suffix_logprobs == []


def test_scores_of_a_prefix_prefilled_in_chunks_and_of_a_stem(tiny):
    _, model = tiny
    prefix = random_ids(140, seed=9)
    suffixes = [random_ids(n, seed=60 + n) for n in (2, 5)]
    for request in (
        ForkRequest(prefix, suffixes, SCORE),
        ForkRequest(prefix, suffixes, SCORE, stem=40),
        ForkRequest(prefix, suffixes, SCORE, stem=40, shared=64),
        ForkRequest(prefix, suffixes, SCORE, shared=64),
    ):
        engine = Engine(model, prefill_tokens=32)  # the prefix in several chunks
        assert_scores(model, request, engine.fork_many([request])[0])


def test_scores_of_a_fork_that_reuses_a_base_stem(tiny):
    _, model = tiny
    engine = Engine(model)
    prompt = random_ids(90, seed=11)
    base_params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    ref = engine.submit_generate(prompt, base_params, shared=32, retain=True)
    base = None
    while engine.busy:
        for done, completion in engine.step():
            if done == ref:
                base = completion
    prefix = prompt + base.token_ids[:8]
    suffixes = [random_ids(n, seed=70 + n) for n in (3, 4)]
    request = ForkRequest(prefix, suffixes, SCORE, stem=9, shared=32, reuse=ref)
    arms = engine.fork_many([request])[0]
    engine.release(ref)
    assert_scores(model, request, arms)


def test_scoring_changes_no_generated_token(tiny):
    _, model = tiny
    suffixes = [random_ids(n, seed=80 + n) for n in (2, 6, 0)]
    plain = SamplingParams(max_new_tokens=10, ignore_eos=True)
    request = ForkRequest(random_ids(120, seed=5), suffixes, plain, stem=30, shared=16)
    without = Engine(model).fork_many([request])[0]
    scored = replace(request, params=replace(plain, score_suffix=True))
    with_scores = Engine(model).fork_many([scored])[0]
    assert [a.token_ids for a in with_scores] == [a.token_ids for a in without]
    assert all(a.suffix_logprobs is None for a in without)
    assert all(not math.isnan(x) for a in with_scores for x in a.suffix_logprobs)


def test_scores_computed_in_blocks_of_rows_are_the_same(tiny, monkeypatch):
    from nudgeability.engine import suffix_scores

    _, model = tiny
    request = ForkRequest(
        random_ids(60, seed=7), [random_ids(n, seed=90 + n) for n in (9, 13)], SCORE
    )
    whole = Engine(model).fork_many([request])[0]
    monkeypatch.setattr(suffix_scores, "SCORE_ROWS", 16)  # 22 scored rows: two blocks
    blocks = Engine(model).fork_many([request])[0]
    assert [a.suffix_logprobs for a in blocks] == [a.suffix_logprobs for a in whole]
    assert_scores(model, request, blocks)


def test_a_shared_start_computed_without_its_last_state_is_refused(tiny):
    from nudgeability.engine import EngineInputError

    _, model = tiny
    engine = Engine(model)
    prefix, long = random_ids(40, seed=13), SamplingParams(max_new_tokens=30, ignore_eos=True)
    engine.submit_fork(ForkRequest(prefix, [[1, 2], [3]], long, shared=len(prefix)))
    engine.step()  # the start is computed, and read by arms still running
    scored = ForkRequest(prefix, [[4, 5]], SCORE, shared=len(prefix))
    with pytest.raises(EngineInputError, match="shared start"):
        engine.submit_fork(scored)
    while engine.busy:  # the refusal left the engine able to finish its work
        engine.step()
    assert_scores(model, scored, Engine(model).fork_many([scored])[0])  # alone it is computed


def test_scores_beside_fixed_shape_decode_rows(tiny):
    """With the fixed-shape decode on, a step that prefills a scored splice beside decoding rows
    runs as one eager forward (its states are read: suffix_scores.py `needs_hidden`); the decode
    steps around it keep the fixed shapes."""
    _, model = tiny
    engine = Engine(model, static_decode=True)
    base = engine.submit_generate(random_ids(60, seed=21), SamplingParams(max_new_tokens=12))
    for _ in range(3):
        engine.step()
    request = ForkRequest(
        random_ids(80, seed=22), [random_ids(n, seed=90 + n) for n in (2, 5)], SCORE
    )
    refs = engine.submit_fork(request)
    done = {}
    while engine.busy:
        for ref, completion in engine.step():
            done[ref.id] = completion
    assert base.id in done and engine.stats.static_steps > 0
    assert_scores(model, request, [done[r.id] for r in refs])
