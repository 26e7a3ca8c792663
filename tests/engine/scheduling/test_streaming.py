"""The streaming API the runner builds on: submit at any time, step, collect what finished, and
fork arms from a base's cut while the base runs or after it finished, reusing its KV."""

from __future__ import annotations

import pytest
import torch
from helpers.engine_reference import assert_matches_reference, random_ids

from nudgeability.engine import Engine, EngineInputError, ForkRequest, SamplingParams
from nudgeability.models.testing.tiny import tiny_model

BASE = SamplingParams(max_new_tokens=30, ignore_eos=True)
ARM = SamplingParams(max_new_tokens=10, ignore_eos=True)


def _run(engine, finished=None):
    finished = {} if finished is None else finished
    while engine.busy:
        for ref, completion in engine.step():
            finished[ref.id] = completion
    return finished


def test_work_submitted_while_other_work_runs_equals_its_solo_run():
    model = tiny_model("qwen3", seed=1)
    engine = Engine(model, max_rows=3)
    first = [
        engine.submit_generate(random_ids(20 + i, seed=i), BASE, return_logits=True)
        for i in range(4)
    ]
    finished = {}
    for _ in range(6):  # the first prompts are decoding when the rest arrives
        for ref, completion in engine.step():
            finished[ref.id] = completion
    late = engine.submit_fork(
        ForkRequest(random_ids(50, seed=9), [random_ids(3, seed=1), []], ARM), return_logits=True
    )
    _run(engine, finished)
    assert set(finished) == {r.id for r in first + late}
    for i, ref in enumerate(first):
        assert_matches_reference(
            model, finished[ref.id], random_ids(20 + i, seed=i), 30, engine.eos_ids
        )
    for suffix, ref in zip([random_ids(3, seed=1), []], late):
        assert_matches_reference(
            model, finished[ref.id], random_ids(50, seed=9) + suffix, 10, engine.eos_ids
        )


def test_peek_shows_the_tokens_so_far_and_step_returns_each_sequence_once():
    engine = Engine(tiny_model("llama", seed=2))
    ref = engine.submit_generate(
        random_ids(12, seed=3), SamplingParams(max_new_tokens=6, ignore_eos=True)
    )
    seen, returned = [], []
    while engine.busy:
        returned += engine.step()
        if engine.busy:
            seen.append(len(engine.peek(ref)))
    assert seen == [0, 1, 2, 3, 4, 5]  # the prompt's step, then one token per step
    assert [r.id for r, _ in returned] == [ref.id] and len(returned[0][1].token_ids) == 6


@pytest.mark.parametrize("arch", ["llama", "qwen3", "glm4", "gemma4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("when", ["finished", "running"])
def test_arms_reusing_a_bases_cut_equal_arms_that_compute_the_stem(arch, dtype, when):
    """Arms forked from a base's cut with `reuse` (its KV copied: none of the stem is computed
    again) give bitwise the logits of arms whose stem is computed from scratch on another engine,
    while the base still runs or after it finished; in fp32 their tokens are HF's on the full
    prompt alone."""
    model = tiny_model(arch, seed=4).to(dtype)
    prompt, cut = random_ids(70, seed=3), 17
    suffixes = [random_ids(3, seed=43), [], random_ids(5, seed=45)]
    engine = Engine(model)
    base = engine.submit_generate(prompt, BASE, retain=(when == "finished"))
    finished = {}
    if when == "finished":
        _run(engine, finished)
    else:
        while len(engine.peek(base)) <= cut:  # the base has written its stem: the cut's tokens
            for ref, completion in engine.step():
                finished[ref.id] = completion
    generated = engine.peek(base)
    request = ForkRequest(prompt + generated[:cut], suffixes, ARM, stem=cut + 1, reuse=base)
    computed_before = engine.stats.token_forwards
    refs = engine.submit_fork(request, return_logits=True)
    _run(engine, finished)
    if when == "finished":
        engine.release(base)
    assert engine.pool.in_use == 0
    reused = [finished[r.id] for r in refs]
    # nothing of the prompt or the stem ran again: only the arms' suffixes (each with the stem's
    # last token, since one suffix is empty) and decodes, and the rest of a running base
    arm_tokens = sum(len(s) + 1 for s in suffixes) + len(suffixes) * (10 - 1)
    base_left = 0 if when == "finished" else 30 - len(generated)
    assert engine.stats.token_forwards - computed_before == arm_tokens + base_left
    fresh = Engine(model).fork_many(
        [ForkRequest(prompt + generated[:cut], suffixes, ARM, stem=cut + 1)], return_logits=True
    )[0]
    for a, b in zip(reused, fresh):
        assert torch.equal(a.logits, b.logits)
    if dtype == torch.float32:
        for suffix, arm in zip(suffixes, reused):
            assert_matches_reference(
                model, arm, prompt + generated[:cut] + suffix, 10, engine.eos_ids
            )


def test_a_stem_whose_base_was_preempted_is_computed_with_the_same_result():
    """A base that loses its KV before the fork copies its stem (here: released) leaves the fork
    to compute the stem: the arms are bitwise the same."""
    model = tiny_model("llama", seed=6)
    prompt, cut = random_ids(40, seed=1), 9
    engine = Engine(model)
    base = engine.submit_generate(prompt, BASE, retain=True)
    _run(engine)
    generated = engine.peek(base)
    request = ForkRequest(
        prompt + generated[:cut], [random_ids(2, seed=2)], ARM, stem=cut + 1, reuse=base
    )
    refs = engine.submit_fork(request, return_logits=True)
    engine.release(base)  # before any step: the stem row finds no KV to copy
    got = _run(engine)[refs[0].id]
    fresh = Engine(model).fork_many(
        [ForkRequest(request.prefix_ids, request.suffixes, ARM, stem=cut + 1)], return_logits=True
    )
    assert torch.equal(got.logits, fresh[0][0].logits)
    assert engine.pool.in_use == 0


def test_reuse_refuses_a_prefix_that_is_not_the_bases():
    engine = Engine(tiny_model("llama"))
    prompt = random_ids(20, seed=1)
    base = engine.submit_generate(prompt, BASE, retain=True)
    _run(engine)
    generated = engine.peek(base)
    with pytest.raises(EngineInputError, match="not the reused sequence's prompt"):
        engine.submit_fork(ForkRequest(prompt[1:] + generated[:3], [[5]], ARM, stem=4, reuse=base))
    with pytest.raises(EngineInputError, match="is not the reused sequence's last prompt token"):
        engine.submit_fork(ForkRequest(prompt + [7, 7, 7], [[5]], ARM, stem=4, reuse=base))
    engine.release(base)
    assert engine.pool.in_use == 0


def test_arms_whose_prompt_slides_out_of_the_window_equal_their_solo_runs():
    """Gemma 4's sliding layers (window 16) see the prompt's last positions from the arms' first
    tokens and none of it a few tokens later: merging a segment the window hides stays exact."""
    model = tiny_model("gemma4", seed=3)
    prompt, cut = random_ids(50, seed=2), 12
    base = Engine(model).generate([prompt], BASE)[0]
    prefix = prompt + base.token_ids[:cut]
    suffixes = [random_ids(3, seed=5), random_ids(6, seed=6)]
    engine = Engine(model)
    request = ForkRequest(prefix, suffixes, SamplingParams(max_new_tokens=12), stem=cut + 1)
    for suffix, arm in zip(suffixes, engine.fork_many([request], return_logits=True)[0]):
        assert_matches_reference(model, arm, prefix + suffix, 12, engine.eos_ids)
