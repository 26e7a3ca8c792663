"""The CUDA-graph self-check's bf16 bound (engine/attention/graphed_decode.py) against what it
must tell apart, measured on CPU in bf16 with the check's own `relative_difference`, at the first
decode step after a fork (the step the self-check compares: one token per row):

- two correct paths that sum in other orders, the engine's eager step against HF's own forward
  of the same sequence, must stay under it;
- a decode step whose rows each read another row's own keys (a stale or shifted slot table in
  the captured step, the fault the check exists for), injected in decode steps only, must
  exceed it;

at 12 and 36 layers (Qwen3-8B's depth). The injection wraps `cpu_decode_rows.row_parts`, which every
layer calls once for all the step's rows, so it does not depend on how rows are split between
cores. Limits: the metric is on logits, not the final hidden states the check reads (logits are
a linear map of the normed states); the correct paths here differ by 0.01-0.03, where the H200's
graph and eager steps of a random-init Qwen3-8B differed by 0.051-0.059 (benchmarks/RESULTS.md,
GPU); a single stale key among a row's 40 is a subtler fault than this one and is not claimed."""

from __future__ import annotations

import pytest
import torch

from nudgeability.engine import Engine, SamplingParams
from nudgeability.engine.attention import cpu_decode_rows, shared_prefix_attention
from nudgeability.engine.attention.graphed_decode import SELF_CHECK_BOUND, relative_difference
from nudgeability.models.testing.tiny import tiny_model

PREFIX = list(range(5, 45))
SUFFIXES = [[50, 51, 52], [60, 61], [70]]


def _first_decode_step_difference(model) -> float:
    """Largest relative logit difference at each arm's first decode step, engine against HF."""
    engine = Engine(model)
    arms = engine.fork(
        PREFIX, SUFFIXES, SamplingParams(max_new_tokens=2, ignore_eos=True), return_logits=True
    )
    worst = 0.0
    for suffix, arm in zip(SUFFIXES, arms):
        ids = torch.tensor([PREFIX + suffix + arm.token_ids[:1]])
        with torch.inference_mode():
            ref = model(input_ids=ids).logits[0, -1].float()
        worst = max(worst, relative_difference(arm.logits[1].float(), ref))
    return worst


@pytest.mark.parametrize("layers", [12, 36])
def test_the_bf16_bound_passes_correct_paths_and_refuses_rows_reading_each_others_keys(
    monkeypatch, layers
):
    assert shared_prefix_attention.fixed_shape_cpu(torch.zeros(1))  # the path wrapped below
    model = tiny_model("qwen3", num_layers=layers, dtype=torch.bfloat16)
    bound = SELF_CHECK_BOUND[torch.bfloat16]
    correct = _first_decode_step_difference(model)
    row_parts = cpu_decode_rows.row_parts
    swapped = []

    def rows_read_each_others_keys(rows, handle, layout, scaling, window):
        computed, parts = row_parts(rows, handle, layout, scaling, window)
        for index, part in enumerate(layout.parts):
            if part.width == 1 and part.rows > 1:  # a decode part: each row takes the next's
                o, lse = computed[index]
                computed[index] = (o.roll(1, dims=0), lse.roll(1, dims=0))
                swapped.append(part.rows)
        return computed, parts

    monkeypatch.setattr(cpu_decode_rows, "row_parts", rows_read_each_others_keys)
    faulty = _first_decode_step_difference(model)
    assert swapped and set(swapped) == {len(SUFFIXES)}, swapped  # decode steps only, every row
    assert correct < bound < faulty, (correct, bound, faulty)
