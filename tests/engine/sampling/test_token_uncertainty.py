"""Per-token log-probability and entropy summaries (SamplingParams.token_stats) and the hidden
state at the prompt's last position (return_hidden), against HF `generate` / forward."""

from __future__ import annotations

import pytest
import torch
from helpers.engine_reference import hf_greedy, random_ids

from nudgeability.engine import Engine, SamplingParams


def reference_from_generate(model, ids, new_tokens, eos_ids):
    """HF greedy generate's logits: (tokens, log-probs of the tokens, entropies)."""
    reference = hf_greedy(model, ids, new_tokens, eos_ids)
    tokens = reference.tokens
    logp = torch.log_softmax(reference.logits.double(), dim=-1)
    chosen = logp[torch.arange(len(tokens)), torch.tensor(tokens)]
    entropy = -(logp.exp() * logp).sum(-1)
    return tokens, chosen.tolist(), entropy.tolist()


def reference_from_forward(model, prompt, generated):
    """Teacher-forced HF forward over prompt + generated: the same summaries per new token."""
    ids = torch.tensor([prompt + generated])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].double()
    logp = torch.log_softmax(logits, dim=-1)
    chosen = logp[torch.arange(len(generated)), torch.tensor(generated)]
    return chosen.tolist(), (-(logp.exp() * logp).sum(-1)).tolist()


def test_greedy_summaries_equal_generate_output_scores(tiny):
    arch, model = tiny
    engine = Engine(model)
    prompts = [random_ids(n, seed=40 + n) for n in (9, 23, 15)]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=12, token_stats=True))
    for prompt, out in zip(prompts, outs):
        tokens, logprobs, entropies = reference_from_generate(model, prompt, 12, engine.eos_ids)
        assert out.token_ids == tokens
        assert out.logprobs == pytest.approx(logprobs, abs=1e-4)
        assert out.entropies == pytest.approx(entropies, abs=1e-4)


def test_sampled_summaries_equal_a_forward_over_the_same_sequence_whatever_the_batch(tiny):
    arch, model = tiny
    engine = Engine(model)
    prompt = random_ids(17, seed=7)
    params = SamplingParams(
        max_new_tokens=10, temperature=1.0, top_p=0.95, seed_key=(0, "p", "B"), token_stats=True
    )
    alone = engine.generate([prompt], params)[0]
    others = [random_ids(n, seed=n) for n in (30, 4)]
    other_params = SamplingParams(max_new_tokens=14, temperature=1.0, seed_key=(1, "q", "B"))
    crowded = engine.generate([others[0], prompt, others[1]], [other_params, params, other_params])
    crowded = crowded[1]
    assert crowded.token_ids == alone.token_ids
    assert crowded.logprobs == pytest.approx(alone.logprobs, abs=1e-5)
    assert crowded.entropies == pytest.approx(alone.entropies, abs=1e-5)
    logprobs, entropies = reference_from_forward(model, prompt, alone.token_ids)
    assert alone.logprobs == pytest.approx(logprobs, abs=1e-4)
    assert alone.entropies == pytest.approx(entropies, abs=1e-4)


def test_no_summaries_unless_asked(tiny):
    arch, model = tiny
    out = Engine(model).generate([random_ids(5, seed=1)], SamplingParams(max_new_tokens=3))[0]
    assert out.logprobs is None and out.entropies is None and out.hidden is None


def test_hidden_state_at_the_prompts_last_position_equals_hf(tiny):
    arch, model = tiny
    engine = Engine(model)
    prompts = [random_ids(n, seed=60 + n) for n in (12, 31)]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=1, return_hidden=True))
    for prompt, out in zip(prompts, outs):
        with torch.no_grad():
            states = model(torch.tensor([prompt]), output_hidden_states=True).hidden_states
        want = states[-1][0, -1].float()
        assert out.hidden.dtype == torch.float16 and out.hidden.shape == want.shape
        assert torch.allclose(out.hidden.float(), want, atol=2e-3 * want.abs().max().item())


@pytest.mark.slow
def test_smollm2_greedy_summaries_equal_generate_output_scores(smollm2):
    model, tokenizer = smollm2.model, smollm2.tokenizer
    engine = Engine(model, tokenizer)
    prompt = tokenizer("The capital of France is", add_special_tokens=False)["input_ids"]
    out = engine.generate([prompt], SamplingParams(max_new_tokens=16, token_stats=True))[0]
    tokens, logprobs, entropies = reference_from_generate(model, prompt, 16, engine.eos_ids)
    assert out.token_ids == tokens
    assert out.logprobs == pytest.approx(logprobs, abs=2e-3)
    assert out.entropies == pytest.approx(entropies, abs=2e-3)
