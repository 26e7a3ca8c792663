"""On CPU a token's own keys run in one kernel call whose width is set by the token's row slot
alone (engine/scheduling/step_layout.py `_by_key_width`, engine/invariant/cpu/attention.py
`own_keys_attention`): every real token of every part of every step, recomputed here from its
slot, sits in a part of exactly ceil((slot + 1) / 128) * 128 keys, whether it is fed alone or in
a prefill chunk, whatever the other rows' lengths; every row token is in exactly one part; and
the arms are still HF's greedy runs."""

from __future__ import annotations

import pytest
from helpers.engine_reference import assert_matches_reference, random_ids

import nudgeability.engine.scheduling.step_layout as layout_module
from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.testing.tiny import tiny_model


@pytest.fixture
def layouts(monkeypatch) -> list:
    """Every StepLayout the engine builds while the test runs."""
    made = []
    build = layout_module.StepLayout.of.__func__

    def of(cls, *args, **kwargs):
        made.append(build(cls, *args, **kwargs))
        return made[-1]

    monkeypatch.setattr(layout_module.StepLayout, "of", classmethod(of))
    return made


def test_every_token_attends_in_a_call_as_wide_as_its_own_slot_sets(layouts):
    model = tiny_model("llama", num_layers=2, seed=5)
    # prefill chunks of 48 tokens cross multiples of 128 slots; the arms' own lengths differ by
    # hundreds of slots, so a step's rows span several widths
    engine = Engine(model, prefill_tokens=48)
    prefix = random_ids(20, seed=1)
    suffixes = [random_ids(n, seed=n) for n in (3, 120, 127, 250, 300)]
    arms = engine.fork(prefix, suffixes, SamplingParams(max_new_tokens=12), return_logits=True)

    widths_seen = set()
    for layout in layouts:
        covered = []
        for part in layout.parts:
            tokens = part.tokens.tolist()
            real = None if part.real is None else set(part.real.tolist())
            for k in range(part.rows):
                for i in range(part.width):
                    if real is not None and k * part.width + i not in real:
                        continue  # a prefill part's padding (repeats a real query)
                    slot = int(part.first_slot[k]) + i
                    assert part.hw == -(-(slot + 1) // 128) * 128, (slot, part.hw)
                    covered.append(tokens[k][i])
            widths_seen.add(part.hw)
        assert sorted(covered) == list(range(layout.row_end - layout.row_start))
    assert {128, 256, 384} <= widths_seen
    for suffix, arm in zip(suffixes, arms):
        assert_matches_reference(model, arm, prefix + suffix, 12, engine.eos_ids)


def test_a_step_with_rows_of_one_width_keeps_one_part(layouts):
    """The common decode step (every row under 128 own keys) is still one call per layer."""
    engine = Engine(tiny_model("llama", num_layers=1, seed=5))
    engine.fork(random_ids(30, seed=2), [[5], [6, 7], [8]], SamplingParams(max_new_tokens=4))
    decode_steps = [lay for lay in layouts if lay.parts and all(p.width == 1 for p in lay.parts)]
    assert decode_steps and all(len(lay.parts) == 1 for lay in decode_steps)
