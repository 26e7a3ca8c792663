"""The self-check of a bucket's first captured step (`StaticDecodeDispatch._self_check`), made
before the run on probe rows (engine/kernel_checks.py), covers every row whose K/V the step writes,
not only the rows that choose a token: the probe's step holds an arm whose one-token chunk is short
of its context's end (it chooses nothing, yet later tokens read its K/V) beside one that samples.
The graph is a CPU stand-in (tests/helpers/cuda_standins.py `CapturedDecode`) whose replay is the
real fixed-shape step; the check, the eager cascade it compares with and the fallback are the
engine's own. Every arm of the run after it is held to HF's greedy run of its whole prompt
(tests/helpers/engine_reference.py)."""

from __future__ import annotations

import pytest
from helpers.cuda_standins import CapturedDecode
from helpers.engine_reference import assert_matches_reference, random_ids

from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.testing.tiny import tiny_model
from nudgeability.util import fallbacks

PATH = "cuda graph of static_decode bucket 16"
PREFIX = random_ids(12, seed=31)


def _fork(suffixes, corrupt=0.0, where="hidden"):
    """A fork whose arms feed one token a step (`prefill_tokens=1`) on the stand-in graph, the
    check made first (`Engine.capture`); returns (the stand-in, (rows, sampling rows) of each
    checked step, fallbacks named `PATH`, the engine)."""
    fallbacks.reset()
    model = tiny_model("llama", num_layers=2, seed=6)
    engine = Engine(
        model, static_decode=True, prefill_tokens=1, max_batch_tokens=16 * 20, max_rows=16
    )
    dispatch = engine.static_dispatch
    dispatch.graphs = captured = CapturedDecode(engine, corrupt, where, only_silent=True)
    checked = []
    check = dispatch._self_check

    def watched(plan, static, hidden, eager):
        checked.append((len(plan.row_chunks), len(plan.sampling())))
        return check(plan, static, hidden, eager)

    dispatch._self_check = watched
    engine.capture()
    steps = len(checked)
    arms = engine.fork(PREFIX, suffixes, SamplingParams(max_new_tokens=5), return_logits=True)
    assert len(checked) == steps  # nothing compared on the run
    for suffix, arm in zip(suffixes, arms):  # a corrupted step's output is never used
        assert_matches_reference(model, arm, PREFIX + suffix, 5, engine.eos_ids)
    named = [f for f in fallbacks.taken() if f.path == PATH]
    return captured, checked, named, engine


def test_the_check_before_the_run_covers_a_row_that_samples_nothing():
    captured, checked, named, engine = _fork([random_ids(3, seed=32), random_ids(2, seed=33)])
    assert checked == [(2, 1)]  # the probe's bucket step: one arm samples, one does not
    assert captured.checked == {16} and captured.runs > 1 and not named and engine.static_decode


@pytest.mark.parametrize("where", ["hidden", "kv"])
def test_a_difference_in_a_row_that_samples_nothing_is_refused(where):
    """Only the probe's silent arm's final hidden states (or its K/V in layer 0) are corrupted:
    the graph is refused before the run, which runs eagerly from its first step."""
    suffixes = [random_ids(1, seed=34), random_ids(3, seed=35)]
    captured, checked, named, engine = _fork(suffixes, corrupt=0.5, where=where)
    assert checked == [(2, 1)] and captured.corrupted == [1] and captured.runs == 1
    assert not engine.static_decode and engine.static_dispatch.graphs is None
    assert engine.stats.static_steps == 0
    what = "final hidden states" if where == "hidden" else "layer 0's K/V"
    assert len(named) == 1 and what in named[0].reason, named
