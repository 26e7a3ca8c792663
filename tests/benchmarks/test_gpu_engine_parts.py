"""The GPU check's timed engine parts (benchmarks/benchkit/gpu/engine_speed.py) where its first H200 run
(2026-12-04) broke: the 256-row decode cell (`KeyError: 0`, rows finished before the last group's
prefill ended) and the campaign part (`ContinuousBatchingConfig` of transformers 5.17 has no
`page_size`). Both run here on CPU with the tiny Qwen3 the dry run uses."""

from __future__ import annotations

import dataclasses
import re

import pytest
from benchkit.gpu import engine as gpu_engine
from benchkit.gpu import engine_speed


def test_a_decode_cell_whose_prefills_take_many_steps_times_every_row(monkeypatch):
    """8 groups of 4 arms on 40-token prefixes, at most 48 prefill tokens a step: the first
    groups decode for several steps before the last is prefilled. Every row must still be running
    when the timed steps start (at the H200 run the first rows had finished: KeyError)."""
    made = []

    def engine_with_small_prefill_steps(model, **kwargs):
        from nudgeability.engine import Engine

        made.append(Engine(model, prefill_tokens=48, **kwargs))
        return made[-1]

    monkeypatch.setattr(engine_speed, "make_engine", engine_with_small_prefill_steps)
    model = gpu_engine._dry_model()
    sizes = dict(gpu_engine.DRY_SIZES, arms_per_group=4, steps=3)
    cell = engine_speed._floor_cell(model, sizes, 32, False, 1e10)
    assert re.match(r"[\d.]+ ms; floor [\d.]+ ms", cell), cell
    engine = made[0]
    assert engine.max_rows == 32 and not engine.busy


def test_hf_batching_options_follow_the_installed_transformers():
    from transformers import ContinuousBatchingConfig

    options = engine_speed.hf_batching_options(
        ContinuousBatchingConfig, page_size=16, num_blocks=4, max_requests_per_batch=8
    )
    ContinuousBatchingConfig(**options)  # the installed class takes them as given


def test_hf_batching_options_name_the_page_size_as_transformers_5_17_did():
    @dataclasses.dataclass
    class Before525:  # transformers 5.17's fields (generation/configuration_utils.py)
        block_size: int = 256
        num_blocks: int | None = None
        max_requests_per_batch: int | None = None
        allow_block_sharing: bool = True

    options = engine_speed.hf_batching_options(
        Before525, page_size=16, num_blocks=4, max_requests_per_batch=8, allow_block_sharing=True
    )
    assert Before525(**options).block_size == 16
    with pytest.raises(TypeError, match="no_such_option"):
        engine_speed.hf_batching_options(Before525, no_such_option=1)


def test_a_failed_hf_request_fails_the_comparison_instead_of_timing_it():
    """At the H200 run every HF request failed in under a second and the table showed HF 100x
    faster than the engine: `hf_complete` must refuse such outputs."""
    from transformers.generation.continuous_batching.requests import GenerationOutput

    good = {f"r{i}": GenerationOutput(f"r{i}", generated_tokens=[1, 2, 3]) for i in range(2)}
    engine_speed.hf_complete(good, 2, 3)
    failed = dict(good, r1=GenerationOutput("r1", error="Inplace update to inference tensor"))
    with pytest.raises(RuntimeError, match="1 failed or short"):
        engine_speed.hf_complete(failed, 2, 3)
    with pytest.raises(RuntimeError, match="returned 2 of 3"):
        engine_speed.hf_complete(good, 3, 3)
