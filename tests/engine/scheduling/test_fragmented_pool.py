"""A stem row (a fork's stem, a trunk, a shared start's rest) writes a run of consecutive blocks
(engine/kv/kv_pool.py `take_run`): with enough free blocks in all but no run of them, it waits
until one frees, and its arms are then HF's greedy tokens on their full prompts."""

from __future__ import annotations

from helpers.engine_reference import assert_matches_reference, random_ids

from nudgeability.engine import Engine, ForkRequest, SamplingParams
from nudgeability.models.testing.tiny import tiny_model

ARM = SamplingParams(max_new_tokens=6, ignore_eos=True)
PROMPT = random_ids(13, seed=21)
TRUNK = PROMPT[-1:] + random_ids(8, seed=22)
ARMS = [random_ids(3, seed=23), random_ids(1, seed=24)]


def _engine(model) -> Engine:
    # 4-token chunks and a 12-block pool of 4 slots: the forks' runs and the arms' blocks
    # interleave, and the stems find free blocks but, at times, no consecutive run of them
    return Engine(model, prefill_tokens=4, max_batch_tokens=40, block_size=4)


def _assert_arms_match_hf(model, engine, requests, results):
    for request, arms in zip(requests, results):
        for suffix, arm in zip(request.suffixes, arms):
            full = request.prefix_ids + suffix
            assert_matches_reference(model, arm, full, ARM.max_new_tokens, engine.eos_ids)


def test_stems_trunk_and_shared_start_on_a_fragmented_pool_are_hfs_greedy_tokens():
    """A stem, two forks into one trunk and a shared start, together on a small pool: every arm
    equals HF on its full prompt, and every block comes back."""
    model = tiny_model("qwen3", seed=3)
    requests = [ForkRequest(PROMPT + TRUNK[1:5], ARMS, ARM, stem=5)]
    requests += [
        ForkRequest(PROMPT + TRUNK[1:s], ARMS, ARM, stem=s, trunk=9, trunk_ids=TRUNK)
        for s in (5, 9)
    ]
    requests += [ForkRequest(PROMPT, ARMS, ARM, shared=4)]
    engine = _engine(model)
    results = engine.fork_many(requests, return_logits=True)
    _assert_arms_match_hf(model, engine, requests, results)
    assert engine.pool.in_use == 0


def test_a_stem_row_waits_for_a_run_of_consecutive_blocks():
    """Every other free block held from outside: enough free blocks for the stem, none two in a
    row. A step runs without the stem row (no run, no slots); once the blocks come back it runs,
    and its arms equal HF's."""
    model = tiny_model("qwen3", seed=3)
    engine = _engine(model)
    request = ForkRequest(PROMPT + TRUNK[1:5], ARMS, ARM, stem=5)
    refs = engine.submit_fork(request, return_logits=True)
    scheduler, pool = engine.scheduler, engine.pool
    (stem_row,) = [r for g in scheduler.waiting for r in g.rows if r.stem is not None]
    finished = {}
    while not stem_row.group.ready:  # the prompt before the stem, in 4-token chunks
        finished.update((r.id, c) for r, c in engine.step())
    assert stem_row in stem_row.group.waiting

    held = [pool.take_block() for _ in range(pool.free_blocks)]
    gaps = held[::2]  # taken highest first: every other block, none adjacent to another
    pool.give_blocks(gaps)
    stem_blocks = pool.blocks_for(stem_row.stem.length)
    assert pool.free_blocks >= stem_blocks + len(scheduler.running)  # enough blocks in all
    assert pool._free.find(b"\x01" * stem_blocks) < 0  # but no run of them

    finished.update((r.id, c) for r, c in engine.step())  # other work runs; the stem waits
    assert stem_row.stem.start is None and not stem_row.holds_slots
    assert all(r.stem is None or r.stem.start is not None for r in scheduler.running)

    pool.give_blocks([b for b in held if b not in gaps])
    while engine.busy:
        finished.update((r.id, c) for r, c in engine.step())
    _assert_arms_match_hf(model, engine, [request], [[finished[r.id] for r in refs]])
    assert pool.in_use == 0
