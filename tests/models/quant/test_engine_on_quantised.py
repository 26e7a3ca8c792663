"""The engine runs quantised models: every forked arm equals the arm's full prompt run alone
(HF `generate(do_sample=False)` on the same quantised model), tokens exactly, logits to 1e-4."""

from __future__ import annotations

import pytest
from helpers.engine_reference import assert_matches_reference, random_ids

from nudgeability.engine import Engine, SamplingParams

ARCHS = ("qwen3", "gemma4", "glm4")
FORMAT_IDS = ("fp8_b32_f16", "w4a16_g32_asym", "bnb_nf4_dq")
SUFFIX_LENGTHS = (1, 2, 3, 5, 8, 13, 17, 24)  # 8 arms of different lengths
NEW_TOKENS = 12


@pytest.mark.parametrize("fmt", FORMAT_IDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_every_forked_arm_of_a_quantised_model_equals_its_solo_greedy_run(
    checkpoint, qt, arch, fmt
):
    model = qt.load(checkpoint(arch, fmt))
    engine = Engine(model)
    prefix = random_ids(210, seed=21)
    suffixes = [random_ids(n, seed=400 + n) for n in SUFFIX_LENGTHS]
    arms = engine.fork(
        prefix, suffixes, SamplingParams(max_new_tokens=NEW_TOKENS), return_logits=True
    )
    assert len(arms) == len(suffixes)
    for suffix, arm in zip(suffixes, arms):
        assert_matches_reference(model, arm, prefix + suffix, NEW_TOKENS, engine.eos_ids)
