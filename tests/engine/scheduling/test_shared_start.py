"""A `shared` start (a system prompt common to many requests) is stored and computed once for all
live requests with the same tokens, and changes no result: each request equals its solo run with
the same `shared`, and in fp32 HF's tokens on its full prompt."""

from __future__ import annotations

import pytest
import torch
from helpers.engine_reference import assert_matches_reference, random_ids

from nudgeability.engine import Engine, EngineInputError, ForkRequest, SamplingParams
from nudgeability.models.testing.tiny import tiny_model

START = random_ids(40, seed=77)  # longer than Gemma 4's window (16)
PARAMS = SamplingParams(max_new_tokens=12, ignore_eos=True)


def _prompts() -> list[list[int]]:
    return [START + random_ids(n, seed=n) for n in (1, 6, 23, 50)] + [START[:30], START + [9]]


@pytest.mark.parametrize("arch", ["llama", "qwen3", "gemma4"])
@pytest.mark.parametrize("static", [False, True])
def test_prompts_sharing_a_start_equal_their_solo_runs(arch, static):
    model = tiny_model(arch, num_layers=3, seed=5)
    prompts = _prompts()
    engine = Engine(model, static_decode=static)
    outs = engine.generate(prompts, PARAMS, shared=len(START), return_logits=True)
    for prompt, out in zip(prompts, outs):
        if not static:  # the fixed-shape steps read the whole pool: not claimed batch-invariant
            alone = Engine(model).generate([prompt], PARAMS, shared=len(START), return_logits=True)
            assert torch.equal(out.logits, alone[0].logits)  # sharing changes no bit
        assert_matches_reference(model, out, prompt, 12, engine.eos_ids)
    assert engine.pool.in_use == 0


def test_the_shared_start_is_computed_once():
    model = tiny_model("llama", num_layers=2, seed=3)
    prompts = [START + random_ids(n, seed=n) for n in (3, 8, 12)]
    engine = Engine(model)
    engine.generate(prompts, PARAMS, shared=len(START))
    # the start once, each prompt's rest once, then one token per step after the first
    expected = len(START) + sum(len(p) - len(START) for p in prompts) + len(prompts) * 11
    assert engine.stats.token_forwards == expected
    unshared = Engine(model)
    unshared.generate(prompts, PARAMS)
    assert unshared.stats.token_forwards == expected + 2 * len(START)


@pytest.mark.parametrize("static", [False, True])
def test_arms_reusing_a_base_with_a_shared_start_equal_arms_computed_afresh(static):
    """Three prefix segments (the shared start, the rest of the prompt, the stem copied from the
    base) give the arms of a fork computed from scratch, and HF's tokens."""
    model = tiny_model("qwen3", num_layers=3, seed=8)
    prompt, cut = START + random_ids(20, seed=4), 9
    engine = Engine(model, static_decode=static)
    base = engine.submit_generate(prompt, PARAMS, shared=len(START), retain=True)
    engine.submit_generate(START + [5, 6], PARAMS, shared=len(START))  # shares the start
    while engine.busy:
        engine.step()
    generated = engine.peek(base)
    suffixes = [random_ids(3, seed=1), [], random_ids(5, seed=2)]
    prefix = prompt + generated[:cut]
    request = ForkRequest(prefix, suffixes, PARAMS, stem=cut + 1, reuse=base, shared=len(START))
    refs, finished = _drain_reusing(engine, request, base)
    fresh = Engine(model, static_decode=static).fork_many(
        [ForkRequest(prefix, suffixes, PARAMS, stem=cut + 1, shared=len(START))],
        return_logits=True,
    )[0]
    for suffix, ref, arm in zip(suffixes, refs, fresh):
        if not static:
            assert torch.equal(finished[ref.id].logits, arm.logits)
        assert_matches_reference(model, finished[ref.id], prefix + suffix, 12, engine.eos_ids)


def test_prompts_sharing_a_start_hold_one_part_filled_block_per_row():
    """The KV in use after every step, against a count made here from what each prompt has
    written: the shared start's blocks once, and each unfinished prompt's rest and generated
    tokens in whole blocks of its own, so that at most one block per row is part-filled."""
    model = tiny_model("llama", num_layers=2, seed=3)
    prompts = [START + random_ids(n, seed=n) for n in (3, 8, 12, 17, 21, 30)]
    budgets = [5, 19, 9, 33, 12, 26]
    engine = Engine(model, max_rows=4, max_batch_tokens=2048, block_size=8)
    refs = [
        engine.submit_generate(p, SamplingParams(max_new_tokens=b, ignore_eos=True), shared=40)
        for p, b in zip(prompts, budgets)
    ]
    blocks = engine.pool.blocks_for
    done = set()
    while engine.busy:
        done.update(r.id for r, _ in engine.step())
        written = [
            len(p) - len(START) + len(engine.peek(r)) - 1
            for p, r in zip(prompts, refs)
            if r.id not in done and engine.peek(r)
        ]
        start = blocks(len(START)) if len(done) < len(prompts) else 0
        assert engine.pool.in_use == start + sum(blocks(w) for w in written)
    assert engine.pool.in_use == 0


def test_a_fork_at_a_bases_first_token_with_an_empty_arm_reuses_a_shared_base():
    """A base that closed at once (its stem is the prompt's last token alone) forked with an empty
    arm: the arms borrow that token, so no stem is left to copy and the base's prompt after the
    shared start (in its row's blocks) is computed again. Before, naming the base refused the
    fork; the arms equal the fork computed afresh, and HF's tokens."""
    model = tiny_model("qwen3", num_layers=3, seed=8)
    prompt = START + random_ids(20, seed=4)
    engine = Engine(model)
    base = engine.submit_generate(prompt, PARAMS, shared=len(START), retain=True)
    while engine.busy:
        engine.step()
    suffixes = [[], random_ids(4, seed=2)]
    request = ForkRequest(prompt, suffixes, PARAMS, stem=1, reuse=base, shared=len(START))
    refs, finished = _drain_reusing(engine, request, base)
    fresh = Engine(model).fork_many(
        [ForkRequest(prompt, suffixes, PARAMS, stem=1, shared=len(START))], return_logits=True
    )[0]
    for suffix, ref, arm in zip(suffixes, refs, fresh):
        assert torch.equal(finished[ref.id].logits, arm.logits)
        assert_matches_reference(model, finished[ref.id], prompt + suffix, 12, engine.eos_ids)


def test_generate_takes_one_shared_count_per_prompt():
    """Each prompt's own `shared` gives the tokens and logits of that prompt generated alone with
    it; a list of the wrong length is refused."""
    model = tiny_model("llama", num_layers=2, seed=3)
    prompts = [START + random_ids(5, seed=1), START[:30] + random_ids(7, seed=2)]
    starts = [len(START), 30]
    params = SamplingParams(max_new_tokens=12)  # stops at EOS, as HF's greedy does
    outs = Engine(model).generate(prompts, params, shared=starts, return_logits=True)
    for prompt, k, out in zip(prompts, starts, outs):
        alone = Engine(model).generate([prompt], params, shared=k, return_logits=True)[0]
        assert torch.equal(out.logits, alone.logits)
        assert_matches_reference(model, out, prompt, 12, Engine(model).eos_ids)
    with pytest.raises(EngineInputError, match="one per prompt"):
        Engine(model).generate(prompts, PARAMS, shared=[3])


def test_shared_starts_that_fill_a_budget_are_dropped_and_computed_again():
    """Three starts' bases, then forks reading each start, all queued under a KV budget that
    holds two starts: the finished bases leave their starts held by queued forks until the
    third start's rows find no block. The scheduler drops a start no started row reads and
    prefills it again for its forks (before, the engine stopped: 'could schedule none of it');
    every sequence equals the same work without a budget, bit for bit."""
    model = tiny_model("llama", num_layers=2, seed=3)
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    starts = [random_ids(400, seed=100 + i) for i in range(3)]
    prompts = [s + random_ids(n, seed=n + i) for i, s in enumerate(starts) for n in (20, 30)]
    shared = [400] * len(prompts)

    def work(engine: Engine) -> list:
        refs = [
            engine.submit_generate(p, params, shared=k, return_logits=True)
            for p, k in zip(prompts, shared)
        ]
        for prompt in prompts:
            request = ForkRequest(
                prompt + random_ids(10, seed=5),
                [random_ids(3, seed=1), []],
                params,
                stem=11,
                shared=400,
            )
            refs += engine.submit_fork(request, return_logits=True)
        finished = {}
        while engine.busy:
            finished.update((r.id, c.logits) for r, c in engine.step())
        assert engine.pool.in_use == 0
        return [finished[r.id] for r in refs]

    free = work(Engine(model))
    for budget in (928, 1120):
        tight = work(Engine(model, max_batch_tokens=budget, block_size=16))
        assert all(torch.equal(a, b) for a, b in zip(tight, free)), budget


def _drain_reusing(engine, request, base):
    """Submit a fork that reuses `base`, step until all is done, release the base; the fork's
    refs and every completion by sequence id, checking that no KV block is left held."""
    refs = engine.submit_fork(request, return_logits=True)
    finished = {}
    while engine.busy:
        finished.update((r.id, c) for r, c in engine.step())
    engine.release(base)
    assert engine.pool.in_use == 0
    return refs, finished
