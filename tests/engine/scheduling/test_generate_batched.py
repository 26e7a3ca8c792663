"""Batched generation of prompts of different lengths equals each prompt generated alone."""

from __future__ import annotations

import pytest
from helpers.engine_reference import assert_matches_reference, random_ids

from nudgeability.engine import Engine, SamplingParams

PROMPT_LENGTHS = (1, 5, 37, 120, 64, 2)


def test_ragged_batch_equals_solo_runs(tiny):
    arch, model = tiny
    engine = Engine(model)
    prompts = [random_ids(n, seed=10 + n) for n in PROMPT_LENGTHS]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=16), return_logits=True)
    for prompt, out in zip(prompts, outs):
        assert_matches_reference(model, out, prompt, 16, engine.eos_ids)
        assert out.prefill_tokens == len(prompt)
        assert out.shared_prefill_tokens == 0
        assert out.decode_tokens == len(out.token_ids) - 1


def test_finish_reason_is_length_or_eos_as_the_reference_stops(tiny):
    arch, model = tiny
    engine = Engine(model)
    prompts = [random_ids(n, seed=40 + n) for n in (12, 30)]
    for out in engine.generate(prompts, SamplingParams(max_new_tokens=9)):
        if out.finish_reason == "eos":
            assert out.token_ids[-1] in engine.eos_ids and out.stop == out.token_ids[-1]
        else:
            assert out.finish_reason == "length" and len(out.token_ids) == 9
            assert not set(out.token_ids) & engine.eos_ids


@pytest.mark.slow
def test_smollm2_ragged_batch_equals_solo_runs(smollm2):
    model, tok = smollm2.model, smollm2.tokenizer
    engine = Engine(model, tok)
    texts = [
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        "Once upon a time",
        "<|im_start|>user\nList three prime numbers and explain why each one is prime, briefly.<|im_end|>\n<|im_start|>assistant\n",
        "def fibonacci(n):",
    ]
    prompts = [tok(t)["input_ids"] for t in texts]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=24), return_logits=True)
    for prompt, out in zip(prompts, outs):
        assert_matches_reference(model, out, prompt, 24, engine.eos_ids)
