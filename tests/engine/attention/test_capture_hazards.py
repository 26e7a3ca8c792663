"""The graphed decode step reads only persistent buffers, and `load()` keeps them where the
capture saw them (tests/helpers/capture_hazards.py runs the capture under a dispatch mode that
records every tensor each op reads)."""

from __future__ import annotations

import torch
from helpers.capture_hazards import HazardCheckedGraphs, block_sparse_flex
from helpers.engine_reference import assert_matches_reference, random_ids

from nudgeability.engine import Engine, ForkRequest, SamplingParams
from nudgeability.engine.attention import static_decode
from nudgeability.models.testing.tiny import tiny_model


def _graphed_engine(monkeypatch, arch="llama"):
    monkeypatch.setattr(static_decode, "flex_attention", block_sparse_flex)
    model = tiny_model(arch, num_layers=2, seed=4)
    # one bucket (16): the engine captures its buckets before its first step
    engine = Engine(model, static_decode=True, max_rows=16)
    engine.static_dispatch.graphs = HazardCheckedGraphs(engine)  # GraphedDecode's CPU stand-in
    return model, engine


def test_the_captured_decode_step_reads_only_buffers_that_outlive_it(monkeypatch):
    """At 397192c the KV write index was computed in warm-up, cached for the step and deleted
    by the next load(): a graph would keep writing K/V to the first step's slots."""
    for arch in ("llama", "gemma4"):  # gemma4: two head shapes, sliding windows, shared KV
        model, engine = _graphed_engine(monkeypatch, arch)
        prefix = random_ids(40, seed=7)
        suffixes = [random_ids(n, seed=n) for n in (4, 9, 2)]
        arms = engine.fork(prefix, suffixes, SamplingParams(max_new_tokens=10), return_logits=True)
        graphs = engine.static_dispatch.graphs
        assert graphs.captures >= 1 and graphs.replays >= 5
        assert not graphs.hazards, graphs.hazards[:3]
        for suffix, arm in zip(suffixes, arms):
            assert_matches_reference(model, arm, prefix + suffix, 10, engine.eos_ids)


def test_the_write_index_is_rewritten_in_place_by_each_load(monkeypatch):
    """The buffer a graph writes K/V through holds the current step's slots after every load(),
    at one address: heads x pool slots + the step's slot, computed here from the slots."""
    model, engine = _graphed_engine(monkeypatch)
    engine.submit_fork(
        ForkRequest(random_ids(30, seed=1), [[5], [6, 7]], SamplingParams(max_new_tokens=8))
    )
    seen = []
    while engine.busy:
        engine.step()
        for static in engine.static_dispatch.statics.values():
            for kv, rows in static.write_rows.items():
                slots = static.pool.num_blocks * static.block_size
                expected = (torch.arange(kv)[None, :] * slots + static.slots[:, None]).reshape(-1)
                assert torch.equal(rows, expected)
                seen.append((static.rows, kv, rows.data_ptr()))
    assert seen and len(set(seen)) == len({(b, kv) for b, kv, _ in seen})  # one address each


def test_every_bucket_is_captured_at_start_largest_first_and_only_replayed_after(monkeypatch):
    """`StaticDecodeDispatch.capture_all` (what a CUDA engine runs at its start) captures the
    buckets 512 down to 16 on a step of pad rows; the steps after it, split steps included,
    only replay, and what each capture read outlives every step."""
    monkeypatch.setattr(static_decode, "flex_attention", block_sparse_flex)
    model = tiny_model("llama", num_layers=2, seed=4)
    engine = Engine(model, static_decode=True, max_batch_tokens=16 * 60)  # a pool never replaced
    dispatch = engine.static_dispatch
    dispatch.graphs = graphs = HazardCheckedGraphs(engine)
    dispatch.capture_all(engine.pool, engine.cache, engine.pad_id)
    assert graphs.order == [512, 256, 128, 64, 32, 16] and not graphs.hazards, graphs.hazards[:3]
    params = SamplingParams(max_new_tokens=10, ignore_eos=True)
    first = random_ids(30, seed=1)
    refs = [engine.submit_generate(first, params, return_logits=True)]
    prefix, suffixes = random_ids(40, seed=7), [random_ids(n, seed=n) for n in (4, 9, 2)]
    done = {}
    for step in range(30):
        if step == 3:  # prefilled while the first prompt decodes: split steps
            refs += engine.submit_fork(ForkRequest(prefix, suffixes, params), return_logits=True)
        if engine.busy:
            done.update({ref.id: out for ref, out in engine.step()})
    assert not engine.busy and engine.stats.split_steps > 0
    assert graphs.captures == 6 and graphs.replays >= 10
    assert not graphs.hazards, graphs.hazards[:3]
    for prompt, ref in zip([first] + [prefix + s for s in suffixes], refs):
        assert_matches_reference(model, done[ref.id], prompt, 10, engine.eos_ids)
