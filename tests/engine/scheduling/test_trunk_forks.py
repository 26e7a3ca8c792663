"""Forks of one base at several cuts share one trunk (`ForkRequest(trunk=..., trunk_ids=...)`):
one copy of the base's KV, each fork reading its own first `stem` tokens of it. Each arm is bit
for bit the same fork run alone with a stem of its own (today's path, on a fresh engine), in fp32
HF's greedy tokens on its full prompt; the pool holds one trunk where separate forks hold a stem
each, and every block comes back, the trunk's once."""

from __future__ import annotations

import pytest
import torch
from helpers.engine_reference import assert_matches_reference, random_ids

from nudgeability.engine import Engine, EngineInputError, ForkRequest, SamplingParams
from nudgeability.engine.kv.kv_pool import KVPool
from nudgeability.models.testing.tiny import tiny_model

BASE = SamplingParams(max_new_tokens=40, ignore_eos=True)
ARM = SamplingParams(max_new_tokens=6, ignore_eos=True)
START = random_ids(20, seed=77)  # a shared start, longer than Gemma 4's window (16)
PROMPT = START + random_ids(12, seed=3)
CUTS = (3, 10, 21, 33)  # generated tokens before each cut; the trunk is the longest stem


def _model(arch="qwen3"):
    return tiny_model(arch, num_layers=2, seed=4)


def _generated(model, shared=0) -> list[int]:
    return Engine(model).generate([PROMPT], BASE, shared=shared)[0].token_ids


def _suffixes(i: int) -> list[list[int]]:
    # an empty arm borrows the prefix's last token: its fork reads one token less of the trunk
    return [random_ids(2 + i, seed=10 + i), []] if i % 2 else [random_ids(3, seed=20 + i)]


def _forks(generated, trunk=True, shared=0, reuse=None, cuts=CUTS, params=ARM) -> list[ForkRequest]:
    length = max(cuts) + 1
    ids = PROMPT[-1:] + generated[: length - 1]
    return [
        ForkRequest(
            PROMPT + generated[:c],
            _suffixes(i),
            params,
            stem=c + 1,
            shared=shared,
            reuse=reuse,
            trunk=length if trunk else 0,
            trunk_ids=ids if trunk else None,
        )
        for i, c in enumerate(cuts)
    ]


def _alone(model, request: ForkRequest):
    """Today's fork: its own stem, computed, on a fresh engine, with nothing beside it."""
    solo = ForkRequest(
        request.prefix_ids, request.suffixes, ARM, stem=request.stem, shared=request.shared
    )
    return Engine(model).fork_many([solo], return_logits=True)[0]


def _drain(engine, finished=None) -> dict:
    finished = {} if finished is None else finished
    while engine.busy:
        finished.update((r.id, c) for r, c in engine.step())
    return finished


def _arm_tokens(requests) -> int:
    """Token-forwards of the arms alone: each one's suffix (with the borrowed token) and decodes."""
    total = 0
    for request in requests:
        borrowed = int(any(not s for s in request.suffixes))
        total += sum(len(s) + borrowed + ARM.max_new_tokens - 1 for s in request.suffixes)
    return total


def _assert_same_bits(model, requests, results):
    for request, arms in zip(requests, results):
        for got, want in zip(arms, _alone(model, request)):
            assert got.token_ids == want.token_ids
            assert torch.equal(got.logits, want.logits)


@pytest.mark.parametrize("shared", [0, len(START)])
@pytest.mark.parametrize("reuse", [False, True])
def test_forks_reading_one_trunk_equal_forks_with_their_own_stems(reuse, shared):
    """Four cuts of one base, one trunk copied from the base (reuse) or computed once: each arm's
    tokens and logits are bitwise the fork's with its own stem, alone; nothing of the prompt or
    the trunk is computed more than once (with reuse: not at all)."""
    model = _model()
    engine = Engine(model)
    base = engine.submit_generate(PROMPT, BASE, shared=shared, retain=True)
    _drain(engine)
    generated = engine.peek(base)
    requests = _forks(generated, shared=shared, reuse=base if reuse else None)
    before, forwards = engine.pool.in_use, engine.stats.token_forwards
    refs = [engine.submit_fork(r, return_logits=True) for r in requests]
    finished = _drain(engine)
    trunk = max(CUTS) + 1
    # the prompt (but a shared start the retained base holds) and the trunk, once; or nothing
    computed = 0 if reuse else len(PROMPT) - 1 - shared + trunk
    assert engine.stats.token_forwards - forwards == computed + _arm_tokens(requests)
    assert engine.pool.in_use == before  # the base's retained KV only
    engine.release(base)
    assert engine.pool.in_use == 0 and len(engine._builder.trunks) == 0
    _assert_same_bits(model, requests, [[finished[r.id] for r in arms] for arms in refs])


@pytest.mark.parametrize(("arch", "static"), [("llama", False), ("gemma4", False), ("qwen3", True)])
def test_arms_at_several_cuts_of_a_trunk_are_hfs_greedy_tokens(arch, static):
    """HF `generate` on each arm's full prompt alone gives the arm's tokens (Gemma 4: the sliding
    window hides the start from the longer stems' arms; the fixed-shape decode: each row's block
    list holds its view's blocks of the trunk), and the eager forks submitted together equal
    each fork alone with its own stem."""
    model = _model(arch)
    generated = _generated(model)
    requests = _forks(generated)
    engine = Engine(model, static_decode=static)
    results = engine.fork_many(requests, return_logits=True)
    for request, arms in zip(requests, results):
        for suffix, arm in zip(request.suffixes, arms):
            full = request.prefix_ids + suffix
            assert_matches_reference(model, arm, full, ARM.max_new_tokens, engine.eos_ids)
    assert (engine.stats.static_steps > 0) == static
    if not static:  # the fixed-shape steps read the whole pool: not claimed batch-invariant
        _assert_same_bits(model, requests, results)
    assert engine.pool.in_use == 0


def test_forks_copying_a_trunk_from_a_running_base_equal_forks_with_their_own_stems():
    """Forks that name a base still generating copy the trunk once the base has written it (the
    base runs on and finishes meanwhile): the same bits, and nothing of the trunk computed."""
    model = _model()
    engine = Engine(model)
    base = engine.submit_generate(PROMPT, BASE)
    trunk = max(CUTS) + 1
    finished = {}
    while len(engine.peek(base)) < trunk - 1:  # the trunk's tokens are known, not all written
        finished.update((r.id, c) for r, c in engine.step())
    requests = _forks(engine.peek(base), reuse=base)
    forwards = engine.stats.token_forwards
    refs = [engine.submit_fork(r, return_logits=True) for r in requests]
    _drain(engine, finished)
    base_left = BASE.max_new_tokens - (trunk - 1)
    assert engine.stats.token_forwards - forwards == base_left + _arm_tokens(requests)
    assert engine.pool.in_use == 0
    _assert_same_bits(model, requests, [[finished[r.id] for r in arms] for arms in refs])


def _blocks(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def test_one_trunk_holds_one_base_trace_where_separate_stems_hold_one_each():
    """The pool's own count: forks at k cuts with one trunk peak within 1.3x one base trace
    (the shared start and the trunk) plus the arms' blocks; the same forks with a stem each hold
    at least the extra stems more (counted here block by block from the cuts)."""
    model = _model()
    shared = len(PROMPT) - 1  # the whole prompt before the stem is one start for every fork
    generated = _generated(model, shared)
    cuts = (5, 12, 19, 26, 33, 40 - 1)
    bs = 4

    def peak(trunk: bool):
        engine = Engine(model, block_size=bs, trace=True)
        requests = _forks(generated, trunk=trunk, shared=shared, cuts=cuts)
        results = engine.fork_many(requests, return_logits=True)
        assert engine.pool.in_use == 0 and engine.stats.preemptions == 0
        for record in engine.stats.trace:  # the live tokens count the trunk once: they fit
            assert record.live_tokens <= record.kv_blocks * bs
        if trunk:
            _assert_same_bits(model, requests[::2], results[::2])
        return engine.pool.peak_in_use, requests

    with_trunk, requests = peak(True)
    separate, _ = peak(False)
    trace = _blocks(shared, bs) + _blocks(max(cuts) + 1, bs)
    arms = 0
    for request in requests:
        borrowed = int(any(not s for s in request.suffixes))
        arms += sum(_blocks(len(s) + borrowed + ARM.max_new_tokens, bs) for s in request.suffixes)
    stems = [c + 1 - int(any(not s for s in r.suffixes)) for c, r in zip(cuts, requests)]
    extra = sum(_blocks(n, bs) for n in stems) - _blocks(max(cuts) + 1, bs)
    print(f"peak blocks of {bs} slots: trunk {with_trunk}, separate stems {separate}")
    assert with_trunk <= 1.3 * (trace + arms)
    assert separate - with_trunk >= extra > 0


@pytest.mark.parametrize("budget", [96, 160])
def test_trunk_forks_under_a_tight_budget_keep_their_bits(budget):
    """A KV budget that cannot hold every fork's arms at once: rows wait and are preempted while
    views of the trunk are read, and every arm keeps its bits; every block comes back."""
    model = _model()
    params = SamplingParams(max_new_tokens=40, ignore_eos=True)
    requests = _forks(_generated(model), params=params)
    free = Engine(model).fork_many(requests, return_logits=True)
    engine = Engine(model, max_batch_tokens=budget, block_size=16)
    tight = engine.fork_many(requests, return_logits=True)
    assert engine.stats.preemptions > 0
    for a_arms, b_arms in zip(free, tight):
        for a, b in zip(a_arms, b_arms):
            assert torch.equal(a.logits, b.logits)
    assert engine.pool.in_use == 0


def test_a_trunk_lives_while_forks_read_it_and_is_given_back_once(monkeypatch):
    """Forks submitted while others read the trunk join it (computed once); once every reader
    finished the trunk goes back to the pool exactly once and is forgotten, and a later fork of
    the same base makes a new one, with the same bits."""
    model = _model()
    generated = _generated(model)
    requests = _forks(generated)
    trunk = max(CUTS) + 1
    engine = Engine(model)
    given: list[int] = []  # the tokens of each run given back, on every pool
    give_run = KVPool.give_run
    monkeypatch.setattr(
        KVPool, "give_run", lambda pool, start, n: (given.append(n), give_run(pool, start, n))
    )
    refs = [engine.submit_fork(r, return_logits=True) for r in requests[:2]]
    finished = {}
    for _ in range(3):  # the trunk is written, the first arms decode
        finished.update((r.id, c) for r, c in engine.step())
    assert len(engine._builder.trunks) == 1
    refs += [engine.submit_fork(r, return_logits=True) for r in requests[2:]]
    _drain(engine, finished)
    assert given.count(trunk) == 1
    assert engine.pool.in_use == 0 and len(engine._builder.trunks) == 0
    assert engine.stats.token_forwards == len(PROMPT) - 1 + trunk + _arm_tokens(requests)
    _assert_same_bits(model, requests, [[finished[r.id] for r in arms] for arms in refs])
    again = engine.fork_many(requests[1:2], return_logits=True)[0]
    assert given.count(trunk) == 2  # a new trunk, given back once
    assert all(torch.equal(a.logits, finished[r.id].logits) for a, r in zip(again, refs[1]))


def test_a_refused_fork_leaves_no_trunk_for_later_forks():
    """A fork refused for its budget after its trunk was made must not leave that trunk (never to
    be computed) for the next fork of the same base to wait on."""
    model = _model()
    generated = _generated(model)
    request = _forks(generated)[0]
    engine = Engine(model, max_batch_tokens=256, block_size=16)
    big = ForkRequest(
        request.prefix_ids,
        request.suffixes,
        SamplingParams(max_new_tokens=400, ignore_eos=True),
        stem=request.stem,
        trunk=request.trunk,
        trunk_ids=request.trunk_ids,
    )
    with pytest.raises(EngineInputError, match="raise the budget"):
        engine.submit_fork(big)
    assert len(engine._builder.trunks) == 0
    got = engine.fork_many([request], return_logits=True)[0]
    _assert_same_bits(model, [request], [got])
    assert engine.pool.in_use == 0


def test_bad_trunks_are_refused_naming_the_field():
    model = _model()
    engine = Engine(model)
    base = engine.submit_generate(PROMPT, BASE, retain=True)
    _drain(engine)
    generated = engine.peek(base)
    good = _forks(generated)[0]

    def fork(**change):
        fields = dict(stem=good.stem, trunk=good.trunk, trunk_ids=good.trunk_ids) | change
        return ForkRequest(good.prefix_ids, good.suffixes, ARM, **fields)

    cases = [
        (fork(trunk=good.stem - 1, trunk_ids=good.trunk_ids[: good.stem - 1]), "shorter than"),
        (fork(stem=0), "needs a stem"),
        (fork(trunk_ids=good.trunk_ids[:-1]), "trunk_ids must hold"),
        (fork(trunk_ids=None), "trunk_ids must hold"),
        (fork(trunk=0), "trunk_ids given without a trunk"),
        (fork(trunk_ids=[7] + good.trunk_ids[1:]), "not the prefix's stem"),
        (fork(trunk_ids=good.trunk_ids[:-1] + [10**6]), "trunk_ids holds"),
    ]
    for request, message in cases:
        with pytest.raises(EngineInputError, match=message):
            engine.submit_fork(request)
    wrong = fork(trunk_ids=good.trunk_ids[:-1] + [(good.trunk_ids[-1] + 1) % 300])
    wrong.reuse = base
    with pytest.raises(EngineInputError, match="trunk_ids: the trunk"):
        engine.submit_fork(wrong)
    engine.release(base)
    assert engine.pool.in_use == 0 and not engine.busy
