"""A sequence's logits do not depend on what else is in the batch, bit for bit (vLLM's needle
test): one prompt alone against the same prompt at a random position among 2-64 others, in fp32
and bf16. What makes it hold, and what breaks it without the engine's padding, is in
engine/README.md (batch invariance)."""

from __future__ import annotations

import random

import pytest
import torch
from helpers.engine_reference import ARCHS, random_ids

from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.testing.tiny import tiny_model


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Batch invariance, which the stream rests on, is measured at one torch thread: the runner
    streams only there (splice/run/runner.py, streams)."""


BATCHES = (2, 3, 5, 8, 16, 17, 33, 64)
PARAMS = SamplingParams(max_new_tokens=12, ignore_eos=True)


def _needle_runs(engine, needle, make_other, batches, seed=0):
    """The needle's logits alone, then at a random position in each batch size."""
    rng = random.Random(seed)
    alone = engine.generate([needle], PARAMS, return_logits=True)[0].logits
    crowded = {}
    for n in batches:
        others = [make_other(rng, n, i) for i in range(n - 1)]
        at = rng.randrange(n)
        outs = engine.generate(others[:at] + [needle] + others[at:], PARAMS, return_logits=True)
        crowded[n] = outs[at].logits
    return alone, crowded


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_a_prompts_logits_are_bitwise_the_same_alone_and_in_any_batch(arch, dtype):
    """fp32 holds by construction on this CPU; in bf16 this checks the attention and elementwise
    paths (the tiny models' random weights happen not to expose bf16 matrix products, whose
    accumulation order changes above 32 rows: engine/README.md)."""
    model = tiny_model(arch, seed=7).to(dtype)
    engine = Engine(model)
    needle = random_ids(37, seed=5)

    def other(rng, n, i):
        return random_ids(rng.randint(3, 80), seed=1000 * n + i)

    alone, crowded = _needle_runs(engine, needle, other, BATCHES)
    assert all(torch.equal(alone, logits) for logits in crowded.values())


def test_without_the_row_padding_a_lone_prompt_differs_from_the_same_prompt_in_a_batch():
    """The control: with every forward at its natural row count (batch_invariant=False) the needle
    gets other fp32 logits in some batches: the matrix products' code paths by row count."""
    model = tiny_model("llama", seed=7)
    engine = Engine(model, batch_invariant=False)
    needle = random_ids(37, seed=5)

    def other(rng, n, i):
        return random_ids(rng.randint(3, 80), seed=1000 * n + i)

    alone, crowded = _needle_runs(engine, needle, other, BATCHES)
    assert not all(torch.equal(alone, logits) for logits in crowded.values())


@pytest.mark.slow
def test_smollm2_needle_is_bitwise_the_same_alone_and_among_64_prompts(smollm2):
    """fp32 only: in bf16 the CPU's matrix products of SmolLM2's real weights accumulate in
    another order above 32 rows, which rounds differently now and then (engine/README.md)."""
    model, tok = smollm2.model, smollm2.tokenizer
    engine = Engine(model, tok)
    words = "the of and to in is was for on that with as by at from it an be this which".split()
    needle = tok("Could a llama birth twice during the War in Vietnam? Think step by step.")[
        "input_ids"
    ]

    def other(rng, n, i):
        return tok(" ".join(rng.choice(words) for _ in range(rng.randint(3, 60))))["input_ids"]

    alone, crowded = _needle_runs(engine, needle, other, (2, 17, 64))
    assert all(torch.equal(alone, logits) for logits in crowded.values())
