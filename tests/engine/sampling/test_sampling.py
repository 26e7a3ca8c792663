"""Seeded sampling: a sequence's tokens depend on its key only; the nucleus matches HF's top-p."""

from __future__ import annotations

import numpy as np
import torch
from helpers.engine_reference import random_ids
from transformers.generation.logits_process import TopPLogitsWarper

from nudgeability.engine import Engine, SamplingParams
from nudgeability.engine.sampling.sampler import greedy, sample
from nudgeability.models.testing.tiny import tiny_model


def _params(key):
    return SamplingParams(max_new_tokens=14, temperature=1.0, top_p=0.95, seed_key=key)


def test_same_key_same_tokens_alone_in_a_batch_of_8_and_reversed():
    model = tiny_model("qwen3", seed=3)
    engine = Engine(model)
    prompts = [random_ids(5 + 7 * i, seed=60 + i) for i in range(8)]
    keys = [(0, f"problem-{i}", "conf") for i in range(8)]
    batched = engine.generate(prompts, [_params(k) for k in keys])
    reversed_ = engine.generate(prompts[::-1], [_params(k) for k in keys[::-1]])[::-1]
    for i in range(8):
        alone = engine.generate([prompts[i]], _params(keys[i]))[0]
        assert alone.token_ids == batched[i].token_ids == reversed_[i].token_ids


def test_forked_arms_sample_by_key_not_by_position():
    model = tiny_model("gemma4", seed=4)
    engine = Engine(model)
    prefix = random_ids(80, seed=5)
    suffixes = [random_ids(n, seed=70 + n) for n in (2, 6, 3)]
    keys = [(1, "p", c) for c in ("conf", "doubt", "neutral")]
    together = engine.fork(prefix, suffixes, [_params(k) for k in keys])
    for suffix, key, arm in zip(suffixes, keys, together):
        assert engine.fork(prefix, [suffix], _params(key))[0].token_ids == arm.token_ids


def test_different_keys_give_different_streams():
    model = tiny_model("llama", seed=5)
    engine = Engine(model)
    prompt = random_ids(20, seed=6)
    outs = engine.generate([prompt] * 4, [_params((s, "p", "B")) for s in range(4)])
    assert len({tuple(o.token_ids) for o in outs}) > 1


def test_nucleus_equals_hf_top_p_warper():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 50, generator=gen) * 3
    for top_p in (0.3, 0.8, 0.95):
        hf_kept = torch.isfinite(TopPLogitsWarper(top_p)(None, logits.clone()))
        # Sweep the uniform over [0, 1): the tokens reached are exactly HF's kept set, in each row.
        u = torch.linspace(0, 0.999999, 2001, dtype=torch.float64).repeat_interleave(64)
        rows = torch.arange(64).repeat(2001)
        tokens = sample(logits[rows], torch.ones(len(u)), torch.full((len(u),), top_p), u)
        reached = torch.zeros_like(hf_kept)
        reached[rows, tokens] = True
        assert torch.equal(reached, hf_kept)


def test_inverse_cdf_frequencies_follow_the_renormalised_nucleus():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, -3.0]])
    probs = torch.softmax(logits[0] / 0.7, dim=-1).double()
    # At temperature 0.7 the probabilities are 0.729, 0.175, 0.086, ...: the top two first reach 0.9.
    keep = torch.tensor([True, True, False, False, False])
    assert (probs[:1].sum() < 0.9) and (probs[:2].sum() >= 0.9)
    expected = torch.where(keep, probs, 0) / probs[keep].sum()
    u = (
        torch.arange(100000, dtype=torch.float64) + 0.5
    ) / 100000  # a uniform grid: exact frequencies
    tokens = sample(
        logits.expand(len(u), -1), torch.full((len(u),), 0.7), torch.full((len(u),), 0.9), u
    )
    freq = torch.bincount(tokens, minlength=5).double() / len(u)
    assert torch.allclose(freq, expected, atol=2e-5)


def test_temperature_zero_is_argmax_and_ignores_the_uniform():
    logits = torch.randn(6, 30, generator=torch.Generator().manual_seed(1))
    tokens = sample(logits, torch.zeros(6), torch.ones(6), torch.rand(6, dtype=torch.float64))
    assert torch.equal(tokens, logits.argmax(-1))


def test_greedy_takes_the_first_of_tied_maxima():
    # rows built with ties at chosen places, including the first and the last column
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(8, 49152, generator=gen)
    places = [(0, 5), (3, 9), (0, 49151), (17, 40000), (1, 2), (7, 7), (100, 30000), (0, 1)]
    for row, cols in enumerate(places):
        logits[row, list(cols)] = logits[row].max() + 1.0
    rows = logits.numpy()
    first = [int(np.flatnonzero(row == row.max())[0]) for row in rows]
    assert greedy(logits).tolist() == first == [min(c) for c in places]
