"""The fixed-shape decode's host tables: built from the blocks listed, not the pool (risk 8 of
issue 31), exact after preemption (risk 9), and the self-check of a captured step."""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers.cuda_standins import CapturedDecode
from helpers.engine_reference import assert_matches_reference, mixed_fork_requests, random_ids

from nudgeability.engine import Engine, ForkRequest, SamplingParams
from nudgeability.engine.attention import static_decode
from nudgeability.models.testing.tiny import tiny_model
from nudgeability.util import fallbacks


def test_a_row_recomputed_after_preemption_decodes_as_if_never_preempted():
    """A tight KV budget preempts rows; recomputed, they take blocks back at other places (and
    positions). At 397192c the owner tables kept a block's first owner and positions: one arm's
    logits moved by about 5 and one token changed."""
    model = tiny_model("qwen3", seed=5)
    free = Engine(model).fork_many(mixed_fork_requests(), return_logits=True)
    tight = Engine(model, max_batch_tokens=300, block_size=4, static_decode=True)
    split = tight.fork_many(mixed_fork_requests(), return_logits=True)
    assert tight.stats.preemptions > 0
    for a, b in zip(free, split):
        for x, y in zip(a, b):
            assert x.token_ids == y.token_ids
            assert torch.allclose(x.logits, y.logits, rtol=0, atol=1e-4)
    request = mixed_fork_requests()[2]
    for suffix, params, arm in zip(request.suffixes, request.params, split[2]):
        assert_matches_reference(
            model, arm, request.prefix_ids + suffix, params.max_new_tokens, tight.eos_ids
        )


def _host_elements(monkeypatch, engine, requests):
    """Elements `StaticDecode.load` sends to the device at each decode step (the tables of
    `decode_layout.DecodeLayout.step`, packed into one copy)."""
    step = static_decode.DecodeLayout.step
    per_step: list[int] = []

    def counted(self, plan, pad_id):
        out = step(self, plan, pad_id)
        per_step.append(len(out[0]))
        return out

    monkeypatch.setattr(static_decode.DecodeLayout, "step", counted)
    out = engine.fork_many(requests, return_logits=True)
    monkeypatch.setattr(static_decode.DecodeLayout, "step", step)
    return per_step, out


def test_host_work_per_decode_step_does_not_grow_with_the_pool(monkeypatch):
    model = tiny_model("llama", num_layers=1, seed=3)
    requests = [
        ForkRequest(random_ids(50, seed=4), [[7], [8, 9], []], SamplingParams(max_new_tokens=6))
    ]
    small = Engine(model, static_decode=True, max_batch_tokens=16 * 60)
    large = Engine(model, static_decode=True, max_batch_tokens=16 * 2000)
    assert large.pool.num_blocks > 30 * small.pool.num_blocks
    counts_small, out_small = _host_elements(monkeypatch, small, requests)
    counts_large, out_large = _host_elements(monkeypatch, large, requests)
    # at 397192c: tiles x pool blocks; the owner tables' slots are sent only where they change
    assert counts_small and counts_small == counts_large
    for a, b in zip(out_small[0], out_large[0]):
        assert a.token_ids == b.token_ids
        assert torch.allclose(a.logits, b.logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("corrupt", [0.0, 0.5])
def test_a_captured_step_is_checked_once_against_the_eager_cascade(corrupt):
    fallbacks.reset()
    model = tiny_model("llama", num_layers=2, seed=6)
    engine = Engine(model, static_decode=True)
    engine.static_dispatch.graphs = captured = CapturedDecode(engine, corrupt)
    prefix, suffixes = random_ids(60, seed=8), [random_ids(n, seed=n) for n in (3, 5)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        arms = engine.fork(prefix, suffixes, SamplingParams(max_new_tokens=8), return_logits=True)
    for suffix, arm in zip(suffixes, arms):  # the corrupted step was never used
        assert_matches_reference(model, arm, prefix + suffix, 8, engine.eos_ids)
    named = [f for f in fallbacks.taken() if f.path == "cuda graph of static_decode bucket 16"]
    if corrupt:
        assert (
            captured.runs == 1
            and engine.static_dispatch.graphs is None
            and not engine.static_decode
        )
        assert len(named) == 1 and "differs from the eager cascade by" in named[0].reason
        assert any("bucket 16" in str(w.message) for w in caught)
    else:
        assert captured.runs > 1 and captured.checked == {16} and not named


def test_a_decode_the_compiler_refuses_drops_to_the_cascade_for_good(monkeypatch):
    """What the engine does when the compiled flex call gives up (Dynamo's recompile limit or a
    failed lowering, recorded where it happens): the step reruns on the eager cascade, and so do
    all later steps."""
    calls = []

    def refused(*args, **kwargs):
        calls.append(1)
        raise static_decode.StaticDecodeUnavailable("stand-in for a recompile limit hit")

    monkeypatch.setattr(static_decode, "flex_attention", refused)
    model = tiny_model("llama", num_layers=2, seed=6)
    engine = Engine(model, static_decode=True)
    prefix, suffixes = random_ids(30, seed=9), [random_ids(n, seed=n) for n in (2, 4)]
    arms = engine.fork(prefix, suffixes, SamplingParams(max_new_tokens=6), return_logits=True)
    assert len(calls) == 1 and not engine.static_decode
    for suffix, arm in zip(suffixes, arms):
        assert_matches_reference(model, arm, prefix + suffix, 6, engine.eos_ids)


def test_a_capture_at_start_the_compiler_refuses_leaves_the_engine_eager(monkeypatch):
    """The capture at the engine's start (`StaticDecodeDispatch.capture_all`) meets the same
    refusal as a step: recorded where it happens, the fixed-shape decode off from the start."""
    from helpers.capture_hazards import HazardCheckedGraphs

    def refused(*args, **kwargs):
        raise static_decode.StaticDecodeUnavailable("stand-in for a failed lowering")

    monkeypatch.setattr(static_decode, "flex_attention", refused)
    model = tiny_model("llama", num_layers=2, seed=6)
    engine = Engine(model, static_decode=True, max_batch_tokens=16 * 40)
    dispatch = engine.static_dispatch
    dispatch.graphs = graphs = HazardCheckedGraphs(engine)
    dispatch.capture_all(engine.pool, engine.cache, engine.pad_id)
    assert not engine.static_decode and dispatch.graphs is None and not graphs.order
    prefix, suffixes = random_ids(30, seed=9), [random_ids(n, seed=n) for n in (2, 4)]
    arms = engine.fork(prefix, suffixes, SamplingParams(max_new_tokens=6), return_logits=True)
    assert engine.stats.static_steps == 0
    for suffix, arm in zip(suffixes, arms):
        assert_matches_reference(model, arm, prefix + suffix, 6, engine.eos_ids)
