"""Masked slots and memory budgets change how work is batched, never what it produces."""

from __future__ import annotations

import pytest
from helpers.engine_reference import assert_matches_reference, random_ids

from nudgeability.engine import Engine, EngineInputError, ForkRequest, SamplingParams
from nudgeability.engine.scheduler import GroupShape, batch_cost, plan_batches
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


def _requests():
    return [
        ForkRequest(
            random_ids(p, seed=p),
            [random_ids(s, seed=p + s) for s in sizes],
            SamplingParams(max_new_tokens=10),
        )
        for p, sizes in (
            (90, (3, 1, 5)),
            (140, (2, 8)),
            (60, (4, 4, 4, 1)),
            (200, (6,)),
            (75, (2, 3)),
        )
    ]


@pytest.mark.parametrize("arch", ["qwen3", "gemma4"])
def test_small_budget_splits_into_several_batches_with_identical_results(arch):
    model = tiny_model(arch, seed=5)
    one = Engine(model)
    small = Engine(model, max_batch_tokens=400)
    shapes = [
        GroupShape(len(r.prefix_ids), tuple(len(s) for s in r.suffixes), (10,) * len(r.suffixes))
        for r in _requests()
    ]
    assert len(plan_batches(shapes, 400)) >= 3
    together = one.fork_many(_requests())
    split = small.fork_many(_requests())
    assert [[a.token_ids for a in arms] for arms in together] == [
        [a.token_ids for a in arms] for arms in split
    ]
    assert small.stats.forward_calls > one.stats.forward_calls


def test_every_planned_batch_fits_the_budget_and_covers_every_group_once():
    shapes = [GroupShape(p, (3, 5), (8, 8)) for p in (50, 300, 120, 120, 20, 260)]
    plan = plan_batches(shapes, 900)
    assert sorted(i for b in plan for i in b) == list(range(len(shapes)))
    assert all(batch_cost([shapes[i] for i in b]) <= 900 for b in plan)
    # cost by hand for one batch: 2 groups padded to 300, 4 rows of 5 + 8 - 1 slots (the last new
    # token is sampled, never written)
    assert batch_cost([shapes[1], shapes[4]]) == 2 * 300 + 4 * 12


def test_a_group_larger_than_the_budget_is_refused():
    with pytest.raises(EngineInputError, match="raise the budget"):
        plan_batches([GroupShape(1000, (5,), (10,))], 500)


def test_an_empty_suffix_moves_the_prefix_last_token_into_every_arm_of_its_group():
    # by hand: prefix 10 with suffixes (0, 3) runs as prefix 9 with suffixes (1, 4)
    assert GroupShape.of(10, (0, 3), (5, 5)) == GroupShape(9, (1, 4), (5, 5), borrowed=1)
    assert GroupShape.of(10, (2, 3), (5, 5)) == GroupShape(10, (2, 3), (5, 5))
    prefix, suffixes = GroupShape.of(4, (0, 2), (1, 1)).split([1, 2, 3, 4], [[], [8, 9]])
    assert (prefix, suffixes) == ([1, 2, 3], [[4], [4, 8, 9]])


@pytest.mark.parametrize("arch", ["llama", "gemma4"])
def test_batch_cost_is_exactly_the_kv_slots_the_engine_allocates(arch, monkeypatch):
    """Count the token slots of every cache the engine builds (prefix before sliding layers are
    cut, suffix rows x slots) and compare with the budget's cost of the same batch."""
    import nudgeability.engine.engine as engine_module
    from nudgeability.engine.fork_cache import ForkCache

    made = []

    class CountingCache(ForkCache):
        def finish_prefix(self, lengths):
            layer = next(s for s in self.storage if s.prefix_k is not None)
            self.prefix_slots = layer.prefix_k.shape[0] * layer.prefix_k.shape[2]
            made.append(self)
            super().finish_prefix(lengths)

        def suffix_slots(self):
            layer = next(s for s in self.storage if s.suffix_k is not None)
            return layer.suffix_k.shape[0] * layer.suffix_k.shape[2]

    monkeypatch.setattr(engine_module, "ForkCache", CountingCache)
    budget = 700
    engine = Engine(tiny_model(arch, seed=1), max_batch_tokens=budget)
    empty_arm = ForkRequest(
        random_ids(40, seed=9), [[], random_ids(3, seed=8)], SamplingParams(max_new_tokens=6)
    )
    requests = _requests() + [empty_arm]
    shapes = [
        GroupShape.of(
            len(r.prefix_ids),
            [len(s) for s in r.suffixes],
            [r.params.max_new_tokens] * len(r.suffixes),
        )
        for r in requests
    ]
    engine.fork_many(requests)
    plan = plan_batches(shapes, budget)
    assert len(plan) == len(made) >= 2
    for batch_groups, cache in zip(plan, made):
        cost = batch_cost([shapes[i] for i in batch_groups])
        assert cache.prefix_slots + cache.suffix_slots() == cost <= budget
