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
    make_engine = engine_speed.make_engine

    def engine_with_small_prefill_steps(model, why="", **derived):
        made.append(make_engine(model, why + "; small prefill steps", prefill_tokens=48, **derived))
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


def test_the_campaign_lets_a_row_part_from_hf_only_at_hfs_own_near_tie():
    """The campaign's "tokens against HF": a row whose tokens part from HF's counts only where
    HF's own margin at that step (its top-1 against the engine's token) is a near-tie
    (nudgeability.models.testing.reference `near_tie`); a parting at a wide margin is counted against."""
    import torch

    from nudgeability.models.testing.reference import RTOL, hf_greedy
    from nudgeability.models.testing.tiny import tiny_model

    torch.manual_seed(0)
    model = tiny_model("qwen3", dtype=torch.float32)
    ids = [5, 17, 42, 9, 77, 3]
    hf = hf_greedy(model, ids, 3)
    theirs = hf.tokens
    worst = int(hf.logits[1].argmin())  # HF's least likely token at step 1: a wide margin
    ours = [theirs[0], worst, theirs[2]]
    margins = engine_speed.hf_margins(model, [ids, ids], [theirs, ours], [theirs, theirs])
    assert margins[0] is None and margins[1] > 2 * RTOL[torch.float32]
    same = engine_speed._same([theirs, ours], [theirs, theirs], margins, RTOL[torch.float32])
    assert same.startswith("1/2 rows identical or parting at HF's own near-tie (margin ≤ 2.0e-04")
    # the same parting, had HF's margin been within the bound, counts
    same = engine_speed._same([theirs, ours], [theirs, theirs], [None, 1e-4], 1e-4)
    assert same.startswith("2/2 rows identical or parting") and "1 such, largest 1.0e-04" in same
    assert engine_speed._same([ours], [theirs], [-1e-5], 1e-4).startswith("0/1 rows")
