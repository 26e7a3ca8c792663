"""The engine runs quantised models: every forked arm equals the arm's full prompt run alone
(HF `generate(do_sample=False)` on the same quantised model), tokens exactly, logits to 1e-4,
with the exact path, the fp32 kernels (`fused`) and the bf16 kernels (`fused-bf16`).

The int4 and bitsandbytes CPU kernels of `fused-bf16` round activations and outputs to bf16. The engine's
attention and HF's differ in the last fp32 bits; where such a difference crosses a bf16 rounding
boundary, one activation moves by one bf16 unit (2^-8 relative) and the change propagates. So for
bf16 kernels the logits are compared to BF16_RTOL: 16 such units (4 layers, each adding at most
a few flipped roundings to what reaches the logits). The greedy tokens must be identical except
at a tie at that precision: a tiny random model's top two logits can lie closer than the bound
(seen on an AMD Zen 5, whose bf16 kernels round otherwise than an Intel's), and there the arm may
take either (`assert_matches_reference`, `ties`). The fp32 kernels keep 1e-4 and exact tokens."""

from __future__ import annotations

import pytest
from helpers.engine_reference import assert_forks_match_reference, random_fork

from nudgeability.engine import Engine

ARCHS = ("qwen3", "gemma4", "glm4")
FORMAT_IDS = ("fp8_b32_f16", "w4a16_g32_asym", "bnb_nf4_dq")
SUFFIX_LENGTHS = (1, 2, 3, 5, 8, 13, 17, 24)  # 8 arms of different lengths
NEW_TOKENS = 12
BF16_RTOL = 16 * 2.0**-8


@pytest.mark.parametrize("compute", ["exact", "fused", "fused-bf16"])
@pytest.mark.parametrize("fmt", FORMAT_IDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_every_forked_arm_of_a_quantised_model_equals_its_solo_greedy_run(
    checkpoint, qt, arch, fmt, compute
):
    model = qt.load(checkpoint(arch, fmt), compute)
    engine = Engine(model)
    request = random_fork((210, 21), SUFFIX_LENGTHS, 400, NEW_TOKENS)
    arms = engine.fork(request.prefix_ids, request.suffixes, request.params, return_logits=True)
    bf16 = "(bf16)" in compute_of(model)
    rtol = BF16_RTOL if bf16 else 1e-4
    assert_forks_match_reference(model, engine, [request], [arms], rtol, ties=bf16)


def compute_of(model) -> str:
    """The compute paths of the model's quantised layers, as one string."""
    from nudgeability.models.quant import compute_paths

    return " ".join(path for paths in compute_paths(model).values() for path in paths)
