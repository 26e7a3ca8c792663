"""The CUDA-graph self-check's bound (engine/attention/graphed_decode.py) against what it must
tell apart, measured on CPU in bf16: the engine's arms against HF's own forward of the same
sequences (two correct paths that sum in other orders) must stay under it, and a step whose rows
read each other's own keys (a stale slot table, the fault it exists for) must exceed it, at 12
and 36 layers (Qwen3-8B's depth). The metric is the check's own `relative_difference`, on the
logits of every new token."""

from __future__ import annotations

import pytest
import torch

from nudgeability.engine import Engine, SamplingParams
from nudgeability.engine.attention import cpu_parts
from nudgeability.engine.attention.graphed_decode import SELF_CHECK_BOUND, relative_difference
from nudgeability.models.testing.tiny import tiny_model

PREFIX = list(range(5, 45))
SUFFIXES = [[50, 51, 52], [60, 61]]


def _largest_difference(model) -> float:
    engine = Engine(model)
    arms = engine.fork(
        PREFIX, SUFFIXES, SamplingParams(max_new_tokens=4, ignore_eos=True), return_logits=True
    )
    worst = 0.0
    for suffix, arm in zip(SUFFIXES, arms):
        ids = torch.tensor([PREFIX + suffix + arm.token_ids[:-1]])
        with torch.inference_mode():
            ref = model(input_ids=ids).logits[0, len(PREFIX) + len(suffix) - 1 :].float()
        worst = max(worst, relative_difference(arm.logits.float(), ref))
    return worst


@pytest.mark.parametrize("layers", [12, 36])
def test_the_bf16_bound_passes_correct_paths_and_refuses_a_stale_slot_table(monkeypatch, layers):
    model = tiny_model("qwen3", num_layers=layers, dtype=torch.bfloat16)
    bound = SELF_CHECK_BOUND[torch.bfloat16]
    correct = _largest_difference(model)
    own_keys = cpu_parts.own_keys_rows

    def rows_swapped(*args):
        out, lse = own_keys(*args)
        return out.roll(1, dims=0), lse  # each row gets its neighbour's attention to own keys

    monkeypatch.setattr(cpu_parts, "own_keys_rows", rows_swapped)
    faulty = _largest_difference(model)
    assert correct < bound < faulty, (correct, bound, faulty)
