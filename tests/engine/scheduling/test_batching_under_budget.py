"""KV budgets, row caps and preemption change how work is scheduled, never what it produces; and
KV is taken as tokens are written, never reserved for a whole budget."""

from __future__ import annotations

import pytest
import torch
from helpers.engine_reference import assert_matches_reference, mixed_fork_requests, random_ids

from nudgeability.engine import Engine, EngineInputError, ForkRequest, SamplingParams
from nudgeability.engine.scheduling.group_shape import GroupShape, batch_cost
from nudgeability.models.testing.tiny import tiny_model


def test_arms_finishing_at_very_different_steps_still_match_solo():
    model = tiny_model("gemma4", seed=2)
    engine = Engine(model)
    prefix = random_ids(120, seed=3)
    suffixes = [random_ids(n, seed=20 + n) for n in (1, 6, 2, 9, 4)]
    budgets = (1, 40, 3, 17, 2)  # rows drop out of the batch at steps 1, 2, 3, 17 and 40
    params = [SamplingParams(max_new_tokens=b) for b in budgets]
    arms = engine.fork(prefix, suffixes, params, return_logits=True)
    for suffix, budget, arm in zip(suffixes, budgets, arms):
        assert_matches_reference(model, arm, prefix + suffix, budget, engine.eos_ids)


@pytest.mark.parametrize("arch", ["qwen3", "gemma4"])
@pytest.mark.parametrize(
    "limits",
    [
        dict(max_rows=1),
        dict(max_rows=3),
        dict(max_batch_tokens=400),
        dict(max_batch_tokens=300, block_size=4),  # preempts
        dict(prefill_tokens=520),
    ],
)
def test_budgets_and_row_caps_change_the_schedule_not_one_bit(arch, limits):
    """The same requests under a small KV pool, a row cap, preemption or another step budget give
    bitwise the logits of one unconstrained run (engine/README.md, batch invariance), and the
    tokens of HF `generate` on each arm alone."""
    model = tiny_model(arch, seed=5)
    free = Engine(model)
    together = free.fork_many(mixed_fork_requests(), return_logits=True)
    limited = Engine(model, **limits)
    split = limited.fork_many(mixed_fork_requests(), return_logits=True)
    for a, b in zip(together, split):
        for x, y in zip(a, b):
            assert torch.equal(x.logits, y.logits) and x.token_ids == y.token_ids
    assert limited.stats.steps >= free.stats.steps
    if limits.get("block_size") == 4:
        assert limited.stats.preemptions > 0
    request = mixed_fork_requests()[2]
    for suffix, params, arm in zip(request.suffixes, request.params, split[2]):
        assert_matches_reference(
            model, arm, request.prefix_ids + suffix, params.max_new_tokens, limited.eos_ids
        )


def test_a_row_holds_blocks_for_the_tokens_it_has_written_not_for_its_budget():
    model = tiny_model("llama", num_layers=2, seed=1)
    engine = Engine(model, block_size=4, trace=True)
    refs = engine.submit_fork(
        ForkRequest(
            random_ids(30, seed=2),
            [random_ids(3, seed=3), random_ids(5, seed=4)],
            SamplingParams(max_new_tokens=40, ignore_eos=True),
        )
    )
    while engine.busy:
        engine.step()
        for row in engine.scheduler.running:
            assert len(row.blocks) == -(-row.computed // 4)  # whole blocks of what it wrote
    assert len(refs) == 2
    # peak blocks by hand: the prefix's 8 blocks, then two rows of 3 + 40 - 1 and 5 + 40 - 1
    # written slots: 11 and 11 blocks
    assert engine.pool.peak_in_use == 8 + 11 + 11
    assert engine.pool.in_use == 0


def test_peak_kv_follows_the_live_tokens_within_a_block_per_row_and_run():
    engine = Engine(tiny_model("qwen3", seed=3), max_batch_tokens=2000, max_rows=4, trace=True)
    engine.fork_many(mixed_fork_requests())
    for record in engine.stats.trace:
        slack = (record.running + len(mixed_fork_requests()) + 1) * engine.block_size
        assert record.kv_blocks * engine.block_size <= record.live_tokens + slack


def test_a_group_that_could_never_run_in_the_pool_is_refused():
    engine = Engine(tiny_model("llama"), max_batch_tokens=500)
    with pytest.raises(EngineInputError, match="raise the budget"):
        engine.fork([5] * 1000, [[6] * 5], SamplingParams(max_new_tokens=10))


def test_an_empty_suffix_moves_the_prefix_last_token_into_every_arm_of_its_group():
    # by hand: prefix 10 with suffixes (0, 3) runs as prefix 9 with suffixes (1, 4)
    assert GroupShape.of(10, (0, 3), (5, 5)) == GroupShape(9, (1, 4), (5, 5), borrowed=1)
    assert GroupShape.of(10, (2, 3), (5, 5)) == GroupShape(10, (2, 3), (5, 5))
    prefix, suffixes = GroupShape.of(4, (0, 2), (1, 1)).split([1, 2, 3, 4], [[], [8, 9]])
    assert (prefix, suffixes) == ([1, 2, 3], [[4], [4, 8, 9]])


def test_batch_cost_counts_each_prefix_once_and_each_arm_at_its_full_budget():
    # by hand: prefixes 300 and 20, four arms of 5 + 8 - 1 slots (the last new token is sampled,
    # never written)
    shapes = [GroupShape(300, (3, 5), (8, 8)), GroupShape(20, (5, 5), (8, 8))]
    assert batch_cost(shapes) == 300 + (3 + 7) + (5 + 7) + 20 + 2 * (5 + 7)
    assert shapes[0].least == 300 + 5 + 7
