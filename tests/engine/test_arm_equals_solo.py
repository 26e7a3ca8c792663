"""Each forked arm generates exactly what the arm's full prompt generates alone under HF `generate`."""

from __future__ import annotations

import pytest
from helpers.engine_reference import (
    assert_forks_match_reference,
    assert_matches_reference,
    random_fork,
    random_ids,
)

from nudgeability.engine import Engine, ForkRequest, SamplingParams

SUFFIX_LENGTHS = (1, 2, 3, 5, 8, 13, 17, 24)  # 8 arms of different lengths
NEW_TOKENS = 20


def test_every_arm_equals_its_solo_greedy_run(tiny):
    arch, model = tiny
    engine = Engine(model)
    request = random_fork((210, 1), SUFFIX_LENGTHS, 100, NEW_TOKENS)
    arms = engine.fork(request.prefix_ids, request.suffixes, request.params, return_logits=True)
    assert_forks_match_reference(model, engine, [request], [arms])
    for suffix, arm in zip(request.suffixes, arms):
        assert arm.prefill_tokens == len(suffix)
        assert arm.shared_prefill_tokens == len(request.prefix_ids)


def test_two_prefix_groups_in_one_batch_equal_their_solo_runs(tiny):
    arch, model = tiny
    engine = Engine(model)
    requests = [
        random_fork((230, 2), (4, 1, 9), 200, 12),
        random_fork((201, 3), (6, 2, 11, 3, 7), 300, 12),
    ]
    results = engine.fork_many(requests, return_logits=True)
    assert [len(r) for r in results] == [3, 5]
    assert_forks_match_reference(model, engine, requests, results)


def test_an_empty_suffix_continues_the_prefix_itself(tiny):
    arch, model = tiny
    engine = Engine(model)
    prefix = random_ids(205, seed=4)
    arms = engine.fork(
        prefix, [[], random_ids(3, seed=5)], SamplingParams(max_new_tokens=10), return_logits=True
    )
    assert_matches_reference(model, arms[0], prefix, 10, engine.eos_ids)
    assert_matches_reference(model, arms[1], prefix + random_ids(3, seed=5), 10, engine.eos_ids)


@pytest.mark.slow
def test_smollm2_arms_equal_solo_greedy_runs(smollm2):
    model, tok = smollm2.model, smollm2.tokenizer
    engine = Engine(model, tok)
    text = (
        "Question: Could the members of The Police perform lawful arrests? Think it through step by step. "
        "The Police were an English rock band formed in London in 1977. Sting, Andy Summers and Stewart "
        "Copeland were musicians, not law enforcement officers. Only sworn officers can perform lawful arrests, "
        "although in England any person may perform a citizen's arrest in some circumstances. "
    ) * 3
    prefix = tok(text)["input_ids"][:220]
    sentences = [
        "I am confident.",
        "I doubt this.",
        "Hmm.",
        "",
        "Let me check each step again before I answer.",
        "So",
        "Wait, maybe the band members were never police officers at all.",
        "Answer:",
    ]
    suffixes = [tok(" " + s)["input_ids"] if s else [] for s in sentences]
    arms = engine.fork(prefix, suffixes, SamplingParams(max_new_tokens=16), return_logits=True)
    for suffix, arm in zip(suffixes, arms):
        assert_matches_reference(model, arm, prefix + suffix, 16, engine.eos_ids)


@pytest.mark.slow
def test_smollm2_two_groups_in_one_batch_equal_solo_runs(smollm2):
    model, tok = smollm2.model, smollm2.tokenizer
    engine = Engine(model, tok)
    a = tok("The capital of France is Paris. The capital of Italy is Rome. " * 12)["input_ids"][
        :200
    ]
    b = tok("Water boils at 100 degrees Celsius at sea level, and freezes at zero. " * 12)[
        "input_ids"
    ][:230]
    requests = [
        ForkRequest(
            a,
            [tok(" The capital of Spain is")["input_ids"], tok(" I")["input_ids"]],
            SamplingParams(max_new_tokens=8),
        ),
        ForkRequest(
            b, [tok(" At high altitude")["input_ids"], []], SamplingParams(max_new_tokens=8)
        ),
    ]
    for req, arms in zip(requests, engine.fork_many(requests, return_logits=True)):
        for suffix, arm in zip(req.suffixes, arms):
            assert_matches_reference(model, arm, req.prefix_ids + suffix, 8, engine.eos_ids)


@pytest.mark.parametrize("arch", ["llama", "gemma4"])
def test_arms_match_solo_on_the_explicit_attention_path_in_row_chunks(arch, monkeypatch):
    """Off CPU the attention parts run as plain matmuls (`lse_kernels.attend_explicit`); force
    that path here, with a tiny score budget that makes many row chunks per layer (a long
    prefix's path, on a short one), over two prefix groups of different lengths."""
    import nudgeability.engine.attention.lse_kernels as lse_kernels
    import nudgeability.engine.attention.shared_prefix_attention as attention
    from nudgeability.models.testing.tiny import tiny_model

    monkeypatch.setattr(attention, "_attend", lse_kernels.attend_explicit)
    monkeypatch.setattr(lse_kernels, "PREFIX_SCORE_ELEMENTS", 64)
    model = tiny_model(arch, seed=9)
    engine = Engine(model)
    requests = [
        random_fork((203, 11), (2, 9, 15), 500, 10),
        random_fork((150, 12), (0, 4), 600, 10),
    ]
    assert_forks_match_reference(
        model, engine, requests, engine.fork_many(requests, return_logits=True)
    )


@pytest.mark.parametrize(
    "prefill_tokens", [64, 10]
)  # chunks longer, then shorter, than Gemma 4's window
def test_chunked_prefix_prefill_keeps_every_arm_equal_to_its_solo_run(tiny, prefill_tokens):
    arch, model = tiny
    engine = Engine(model, prefill_tokens=prefill_tokens)
    requests = [random_fork((205, 31), (3, 8), 700, 8), random_fork((117, 32), (1, 5), 800, 8)]
    results = engine.fork_many(requests, return_logits=True)
    assert engine.stats.forward_calls > 10  # the prefixes really were prefilled in many chunks
    assert_forks_match_reference(model, engine, requests, results)
