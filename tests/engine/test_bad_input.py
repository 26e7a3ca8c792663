"""Requests the engine cannot run fail with a ValueError that says what is wrong."""

from __future__ import annotations

import pytest

from nudgeability.engine import (
    Engine,
    EngineInputError,
    ForkRequest,
    SamplingParams,
    UnsupportedModelError,
)
from nudgeability.models.testing.tiny import tiny_model


@pytest.fixture(scope="module")
def engine():
    return Engine(tiny_model("llama"))


def test_empty_prefix_is_refused(engine):
    with pytest.raises(EngineInputError, match="prefix is empty"):
        engine.fork([], [[5, 6]], SamplingParams(max_new_tokens=4))


def test_empty_suffix_list_is_refused(engine):
    with pytest.raises(EngineInputError, match="suffix list is empty"):
        engine.fork([5, 6, 7], [], SamplingParams(max_new_tokens=4))


def test_suffix_plus_new_tokens_over_the_context_is_refused(engine):
    limit = engine.model.config.max_position_embeddings
    with pytest.raises(EngineInputError, match=f"exceeds the model's context of {limit}"):
        engine.fork([5] * (limit - 10), [[6] * 5], SamplingParams(max_new_tokens=6))


def test_a_token_id_outside_the_vocabulary_is_refused(engine):
    with pytest.raises(EngineInputError, match="suffix 1 holds 99999"):
        engine.fork([5, 6], [[7], [99999]], SamplingParams(max_new_tokens=2))


def test_empty_prompt_list_and_empty_prompt_are_refused(engine):
    with pytest.raises(EngineInputError, match="non-empty list of prompts"):
        engine.generate([], SamplingParams())
    with pytest.raises(EngineInputError, match="prompt 1 is empty"):
        engine.generate([[4], []], SamplingParams())


def test_params_count_must_match_the_arms(engine):
    with pytest.raises(EngineInputError, match="list of 2"):
        engine.fork([5, 6], [[7], [8]], [SamplingParams()])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(max_new_tokens=0), "max_new_tokens must be a positive integer"),
        (dict(temperature=-1.0), "temperature must be >= 0"),
        (dict(top_p=0.0), "top_p must be in"),
        (dict(temperature=1.0), "needs a seed_key"),
        (dict(stop_strings=("",)), "empty string"),
    ],
)
def test_bad_sampling_params_are_refused(kwargs, message):
    with pytest.raises(EngineInputError, match=message):
        SamplingParams(**kwargs)


def test_engine_errors_are_value_errors():
    assert issubclass(EngineInputError, ValueError)


def test_stop_strings_without_a_tokenizer_are_refused_before_any_forward(engine):
    calls = engine.stats.forward_calls
    with pytest.raises(EngineInputError, match="stop_strings need a tokenizer"):
        engine.generate([[5, 6, 7]], SamplingParams(max_new_tokens=4, stop_strings=("x",)))
    with pytest.raises(EngineInputError, match="request 1: stop_strings need a tokenizer"):
        engine.fork_many(
            [
                ForkRequest([5, 6], [[7]], SamplingParams(max_new_tokens=2)),
                ForkRequest([5, 6], [[7]], SamplingParams(max_new_tokens=2, stop_strings=("x",))),
            ]
        )
    assert engine.stats.forward_calls == calls


def test_attention_soft_capping_is_refused_with_a_typed_error():
    model = tiny_model("llama")
    model.config.attn_logit_softcapping = 50.0
    with pytest.raises(UnsupportedModelError, match="attention logit soft-capping"):
        Engine(model)


def test_peeking_at_a_finished_sequence_says_where_its_tokens_are(engine):
    """A sequence that finished without `retain` is no longer held: peek names the completion
    (the GPU check's decode cell once peeked at such a row and died on a bare KeyError: 0)."""
    (ref,) = engine.submit_fork(ForkRequest([5, 6, 7], [[8]], SamplingParams(max_new_tokens=1)))
    finished = []
    while engine.busy:
        finished += engine.step()
    assert [r for r, _ in finished] == [ref]
    with pytest.raises(EngineInputError, match="not running or retained.*retain=True"):
        engine.peek(ref)
