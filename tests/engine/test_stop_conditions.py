"""Each sequence stops on its own: EOS, its stop token ids, its stop strings, or max_new_tokens."""

from __future__ import annotations

import pytest
from helpers.engine_reference import random_ids

from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.testing.tiny import tiny_model


def test_stop_token_ends_the_sequence_where_the_unconstrained_run_emits_it():
    engine = Engine(tiny_model("qwen3", seed=7))
    prompt = random_ids(30, seed=1)
    free = engine.generate([prompt], SamplingParams(max_new_tokens=20))[0].token_ids
    stop = free[6]
    cut = free.index(stop) + 1  # the first occurrence ends it, the stop token included
    out = engine.generate([prompt], SamplingParams(max_new_tokens=20, stop_token_ids=(stop,)))[0]
    assert out.token_ids == free[:cut]
    assert (out.finish_reason, out.stop) == ("stop_token", stop)


def test_each_arm_stops_on_its_own_stop_ids():
    engine = Engine(tiny_model("llama", seed=8))
    prefix = random_ids(50, seed=2)
    suffixes = [random_ids(n, seed=n) for n in (2, 3, 4)]
    free = engine.fork(prefix, suffixes, SamplingParams(max_new_tokens=16))
    params = [
        SamplingParams(max_new_tokens=16, stop_token_ids=(f.token_ids[k],))
        for f, k in zip(free, (1, 7, 12))
    ]
    arms = engine.fork(prefix, suffixes, params)
    for f, p, arm in zip(free, params, arms):
        stop = p.stop_token_ids[0]
        assert arm.token_ids == f.token_ids[: f.token_ids.index(stop) + 1]


@pytest.mark.slow
def test_stop_string_cuts_where_the_decoded_text_first_contains_it(smollm2):
    model, tok = smollm2.model, smollm2.tokenizer
    engine = Engine(model, tok)
    prompt = tok(
        "<|im_start|>user\nCount from 1 to 20, one number per line.<|im_end|>\n<|im_start|>assistant\n"
    )["input_ids"]
    free = engine.generate([prompt], SamplingParams(max_new_tokens=40))[0].token_ids
    stop = tok.decode(free).split()[4]  # a word the free run writes, possibly spanning tokens
    # reference: the shortest prefix of the free run whose decoded text contains the stop string
    cut = next(k for k in range(1, len(free) + 1) if stop in tok.decode(free[:k]))
    out = engine.generate([prompt], SamplingParams(max_new_tokens=40, stop_strings=(stop,)))[0]
    assert out.token_ids == free[:cut]
    assert (out.finish_reason, out.stop) == ("stop_string", stop)
