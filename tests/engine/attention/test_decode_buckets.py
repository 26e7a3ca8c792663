"""The fixed-shape decode's buckets reach the engine's row cap (512 rows when it is given none),
so no decode step runs eagerly for being wide, and stop there, so no bucket above it is compiled
or captured; the graphs' capture order is largest first (engine/attention/decode_buckets.py)."""

from __future__ import annotations

import pytest
from helpers.engine_reference import assert_matches_reference, random_ids

from nudgeability.engine import Engine, ForkRequest, SamplingParams
from nudgeability.engine.attention.decode_buckets import (
    bucket_for,
    bucket_sizes,
    capture_order,
)
from nudgeability.models.testing.tiny import tiny_model
from nudgeability.util import fallbacks

DEFAULT = (16, 32, 64, 128, 256, 512)


@pytest.mark.parametrize(
    "max_rows, expected",
    [
        (None, DEFAULT),
        (1, (16,)),
        (16, (16,)),
        (56, (16, 32, 64)),
        (300, DEFAULT),
        (512, DEFAULT),
        (513, DEFAULT + (1024,)),
        (1024, DEFAULT + (1024,)),
        (1025, DEFAULT + (1024, 2048)),
    ],
)
def test_buckets_are_powers_of_two_from_16_to_the_row_cap_or_512(max_rows, expected):
    assert bucket_sizes(max_rows) == expected


def test_every_row_count_up_to_the_cap_has_the_smallest_bucket_that_holds_it():
    for cap in (1, 7, 56, 512, 700, 2048, 3000):
        buckets = bucket_sizes(cap)
        assert buckets[-1] >= cap and (buckets[-1] == 16 or buckets[-1] // 2 < cap)
        for rows in range(1, cap + 1):
            bucket = bucket_for(rows, buckets)
            # the brute-force answer: the least power of two >= rows, and never below 16
            least = 16
            while least < rows:
                least *= 2
            assert bucket == least, (cap, rows, bucket)
        assert bucket_for(buckets[-1] + 1, buckets) is None
    with pytest.raises(ValueError):
        bucket_sizes(0)


def test_graphs_are_captured_largest_bucket_first():
    assert capture_order(DEFAULT) == (512, 256, 128, 64, 32, 16)
    assert capture_order((32, 16, 1024, 16)) == (1024, 32, 16)


def test_the_engine_caps_its_rows_at_the_largest_bucket_only_with_the_fixed_shape_decode():
    model = tiny_model("llama", num_layers=1, seed=2)
    assert Engine(model).scheduler.max_rows is None  # the eager default: no cap, as before
    assert Engine(model, static_decode=True).scheduler.max_rows == 512
    assert Engine(model, static_decode=True, max_rows=56).static_dispatch.buckets == (16, 32, 64)
    wide = Engine(model, static_decode=True, max_rows=600)
    assert wide.scheduler.max_rows == 600 and wide.static_dispatch.buckets[-1] == 1024
    wide.limit_rows(2000)
    assert wide.static_dispatch.buckets[-1] == 2048 and wide.scheduler.max_rows == 2000


def test_a_decode_step_of_300_rows_runs_with_fixed_shapes_and_gives_the_solo_tokens():
    """More rows than the old largest bucket (256): every decode step takes bucket 512, none
    falls back to the eager cascade, and arms equal HF's solo runs."""
    fallbacks.reset()
    model = tiny_model("llama", num_layers=1, seed=5)
    prefix = random_ids(20, seed=3)
    suffixes = [random_ids(1 + n % 3, seed=1000 + n) for n in range(300)]
    params = SamplingParams(max_new_tokens=3, ignore_eos=True)
    engine = Engine(model, static_decode=True)
    buckets = []
    decode = engine.static_dispatch._decode

    def spy(plan, *args):
        buckets.append(len(plan.row_chunks))
        return decode(plan, *args)

    engine.static_dispatch._decode = spy
    (arms,) = engine.fork_many([ForkRequest(prefix, suffixes, params)], return_logits=True)
    assert max(buckets) == 300 and 512 in engine.static_dispatch.statics
    assert not [f for f in fallbacks.taken() if f.path.startswith("static_decode")]
    for i in (0, 1, 150, 299):
        assert_matches_reference(model, arms[i], prefix + suffixes[i], 3, engine.eos_ids)
    eager = Engine(model).fork(prefix, suffixes, params)
    assert [a.token_ids for a in arms] == [a.token_ids for a in eager]


def test_only_the_buckets_up_to_the_row_cap_are_captured(monkeypatch):
    """As `nudge run` makes its CUDA engine (splice/run/runner.py `unit_context`): the engine is
    made with no row cap, then `limit_rows` sets the cap its pool holds, and the capture comes
    after, so a cap of 20 rows captures buckets 32 and 16 only, largest first; a later step
    captures nothing more. (The graphs are the CPU stand-in of tests/helpers/capture_hazards.py.)"""
    from helpers.capture_hazards import HazardCheckedGraphs, block_sparse_flex

    from nudgeability.engine.attention import static_decode

    monkeypatch.setattr(static_decode, "flex_attention", block_sparse_flex)
    model = tiny_model("llama", num_layers=1, seed=5)
    engine = Engine(model, static_decode=True, max_batch_tokens=16 * 40)
    engine.static_dispatch.graphs = graphs = HazardCheckedGraphs(engine)
    engine.limit_rows(20)
    engine.capture()
    assert graphs.order == [32, 16] and not graphs.hazards
    prefix, suffixes = random_ids(20, seed=3), [random_ids(1 + n, seed=n) for n in range(20)]
    params = SamplingParams(max_new_tokens=3, ignore_eos=True)
    arms = engine.fork(prefix, suffixes, params, return_logits=True)
    assert graphs.order == [32, 16] and graphs.replays > 0
    for i in (0, 19):
        assert_matches_reference(model, arms[i], prefix + suffixes[i], 3, engine.eos_ids)
