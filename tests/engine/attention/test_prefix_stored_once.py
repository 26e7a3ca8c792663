"""A group's prefix is stored once, in one run of the pool, and read in place once per step for
all its arms, whatever the number of arms."""

from __future__ import annotations

import pytest
from helpers.engine_reference import random_ids

import nudgeability.engine.attention.cpu_decode_rows as cpu_decode_rows
from nudgeability.engine import Engine, ForkRequest, SamplingParams
from nudgeability.models.testing.tiny import tiny_model


@pytest.fixture
def prefix_reads(monkeypatch):
    """Every prefix read of the row tokens' attention: (step layout, keys' data pointer, key
    count, row tokens reading them), in order (the layouts are kept, so that their ids stay
    unique). On CPU the reads are `cpu_decode_rows.segment_calls`, one per segment for every group
    that shares it; recorded as `row_parts` plans them, with the layer's own pool handle."""
    calls = []
    original = cpu_decode_rows.row_parts

    def recording(rows, handle, layout, scaling, window):
        for call in cpu_decode_rows.segment_calls(layout, window):
            view = handle.k[:, call.start : call.start + call.keys]
            tokens = sum(layout.groups[i].a1 - layout.groups[i].a0 for i, _ in call.members)
            calls.append((layout, view.data_ptr(), view.shape[1], tokens))
        return original(rows, handle, layout, scaling, window)

    monkeypatch.setattr(cpu_decode_rows, "row_parts", recording)
    return calls


def _rows_held(engine) -> int:
    return sum(1 for r in engine.scheduler.running if r.stem is None)


@pytest.mark.parametrize("arch", ["llama", "gemma4"])
def test_the_prefix_takes_the_same_pool_blocks_for_1_8_or_32_arms(arch):
    model = tiny_model(arch)
    prefix = random_ids(240, seed=1)
    held = {}
    for n in (1, 8, 32):
        engine = Engine(model, block_size=16)
        refs = engine.submit_fork(
            ForkRequest(
                prefix,
                [random_ids(1 + i % 7, seed=i) for i in range(n)],
                SamplingParams(max_new_tokens=4),
            )
        )
        engine.step()  # the prefix's step: only its run is allocated
        group = engine.scheduler.admitted[0]
        assert group.own.complete and len(refs) == n
        held[n] = engine.pool.in_use
        while engine.busy:
            engine.step()
        assert engine.pool.in_use == 0  # everything returned when the group is done
    assert held[1] == held[8] == held[32] == -(-240 // 16)


def test_every_step_reads_each_prefix_in_place_once_for_all_its_arms(prefix_reads):
    engine = Engine(tiny_model("qwen3", num_layers=2))
    prefix = random_ids(220, seed=4)
    engine.fork(
        prefix, [random_ids(n, seed=n) for n in (1, 4, 9)], SamplingParams(max_new_tokens=12)
    )
    pool = engine.pool
    steps = {}
    for step, pointer, keys, rows in prefix_reads:
        steps.setdefault(id(step), []).append((pointer, keys, rows))
    # 2 layers per step, one call each: the three arms' rows folded into one call, never per arm
    assert len(steps) == 12  # the suffixes' step and 11 decode steps
    assert all(len(calls) == 2 for calls in steps.values())
    pointers = {pointer for calls in steps.values() for pointer, _, _ in calls}
    assert len(pointers) == 2  # the same run of each layer's pool, every step
    storage = {t.untyped_storage().data_ptr() for t in pool.k if t is not None}
    assert all(any(0 <= p - s < 10**9 for s in storage) for p in pointers)  # views of the pool
    assert all(keys == 220 for calls in steps.values() for _, keys, _ in calls)
    decode_rows = [rows for calls in list(steps.values())[1:] for _, _, rows in calls]
    assert set(decode_rows) == {3}


def test_two_groups_hold_two_runs_not_one_per_arm(prefix_reads):
    engine = Engine(tiny_model("glm4", num_layers=2))
    requests = [
        ForkRequest(
            random_ids(200, seed=5), [random_ids(2, seed=6)] * 6, SamplingParams(max_new_tokens=3)
        ),
        ForkRequest(
            random_ids(200, seed=7), [random_ids(3, seed=8)] * 6, SamplingParams(max_new_tokens=3)
        ),
    ]
    refs = [engine.submit_fork(r) for r in requests]
    engine.step()  # both prefixes
    assert engine.pool.in_use == 2 * -(-200 // engine.block_size)
    while engine.busy:
        engine.step()
    per_step = {}
    for step, pointer, _, rows in prefix_reads:
        per_step.setdefault(id(step), set()).add((pointer, rows))
    # each step reads two runs per layer (2 layers), each once for its 6 arms' query tokens
    # (their suffixes of 2 and 3 tokens in the first step, one token each after that)
    steps = list(per_step.values())
    assert len(steps) == 3 and all(len(calls) == 4 for calls in steps)
    assert sorted({rows for _, rows in steps[0]}) == [12, 18]
    assert all(rows == 6 for calls in steps[1:] for _, rows in calls)
    assert len(refs) == 2 and _rows_held(engine) == 0


def test_a_sliding_layer_reads_only_the_last_window_of_the_prefix(prefix_reads):
    """Gemma 4's sliding layers (window 16) read the prefix's last 15 positions: all that a row
    token can see; its full layers read the whole prefix."""
    engine = Engine(tiny_model("gemma4"))
    engine.fork(random_ids(100, seed=2), [random_ids(3, seed=3)], SamplingParams(max_new_tokens=2))
    assert {keys for _, _, keys, _ in prefix_reads} == {15, 100}


def test_groups_sharing_a_start_read_it_once_per_step_for_all_their_rows(prefix_reads):
    """Three prompts with a common `shared` start are three groups; on a layer with no window
    the start is one read per step for the three rows together (tests/engine/scheduling/test_shared_start.py
    shows that this changes no bit against each prompt alone)."""
    engine = Engine(tiny_model("qwen3", num_layers=2))
    start = random_ids(100, seed=11)
    prompts = [start + random_ids(n, seed=n) for n in (4, 9, 17)]
    engine.generate(prompts, SamplingParams(max_new_tokens=5, ignore_eos=True), shared=100)
    steps: dict = {}
    for step, pointer, keys, tokens in prefix_reads:
        steps.setdefault(id(step), []).append((pointer, keys, tokens))
    decode = [calls for calls in steps.values() if sum(t for _, _, t in calls) <= 2 * 3 * 2]
    assert decode  # steps of one token per row
    for calls in decode:
        starts = [(pointer, tokens) for pointer, keys, tokens in calls if keys == 100]
        assert len(starts) == 2  # one per layer
        assert {tokens for _, tokens in starts} == {3}  # all three rows in the one read
