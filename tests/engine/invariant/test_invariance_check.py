"""Invariance by construction, at any thread count and on BLAS code paths other than this
machine's: vLLM's needle test (one prompt alone against the same prompt at several places among
2-40 others, every step's logits bit for bit) at 1, 2 and 4 torch threads, with its negative
control; the same logits at every thread count; and the schedule-invariance tests run again under
each of MKL's code branches (`MKL_CBWR`) with oneDNN held to the same generation's ISA
(`ONEDNN_MAX_CPU_ISA`), which is how this machine stands in for an AMD or an older Intel
(engine/README.md, batch invariance)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import torch
from helpers.child_pytest import run_pytest
from helpers.engine_reference import ARCHS

from nudgeability.engine import Engine, SamplingParams
from nudgeability.engine.invariant.needle import check_invariance
from nudgeability.models.testing.tiny import tiny_model


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("count", [1, 2, 4])
def test_the_needle_holds_at_one_two_and_four_threads(arch, count, threads):
    threads(count)
    check = check_invariance(tiny_model(arch, seed=7))
    assert check.holds, check
    assert check.threads == count


def test_without_the_fixed_shape_products_the_needle_differs():
    """The negative control: with every forward at its natural row count and the library's own
    `F.linear` (batch_invariant=False), some batch gives the needle other logits."""
    check = check_invariance(tiny_model("llama", seed=7), batch_invariant=False)
    assert not check.holds and check.differing


def _logits_at(count: int) -> list[torch.Tensor]:
    torch.set_num_threads(count)
    rng = random.Random(0)
    out = []
    for arch in ARCHS:
        engine = Engine(tiny_model(arch, seed=7))
        prompts = [
            [rng.randrange(engine.vocab_size) for _ in range(rng.randint(5, 300))]
            for _ in range(12)
        ]
        params = SamplingParams(max_new_tokens=6, ignore_eos=True)
        out += [c.logits for c in engine.generate(prompts, params, return_logits=True)]
    return out


def test_the_logits_are_the_same_bits_at_one_two_and_four_threads(threads):
    """Records do not depend on the thread count: the engine's CPU forward runs on one thread
    whatever torch is set to (engine/invariant/cpu/products.py)."""
    one = _logits_at(1)
    for count in (2, 4):
        assert all(torch.equal(a, b) for a, b in zip(one, _logits_at(count)))


# Each MKL branch beside the oneDNN ISA of the same CPU generation: the fp32 products go to
# oneDNN's matmul (engine/invariant/cpu/products.py), the attention's GEMMs to MKL's, so an older CPU is both
# held back together.
ONEDNN_ISA = {
    "COMPATIBLE": "SSE41",
    "SSE4_2": "SSE41",
    "AVX": "AVX",
    "AVX2": "AVX2",
    "AVX512": "AVX512_CORE",
}


def _branches() -> list[str]:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    branches = ["COMPATIBLE", "SSE4_2", "AVX", "AVX2"]
    return branches + (["AVX512"] if " avx512f" in flags else [])


# What must hold under every branch is what the kernels decide: the needle (a row's logits
# alone and among others, which is what the stream, a resume and a replay rest on, and what a run
# checks on its own machine before it takes the stream), the budgets and row caps that change
# the schedule and not one bit, and the products' larger blocks against their tiles. The
# schedules built on them (streaming, the shared start) run in the suite on this machine's own
# branch; under another they add no kernel call these do not make. One child per branch, each on
# one worker (MKL reads its branch when it starts), on a subset of architectures.
UNDER_BRANCHES = [
    "tests/engine/invariant/test_batch_invariance.py",
    "tests/engine/scheduling/test_batching_under_budget.py::test_budgets_and_row_caps_change_the_schedule_not_one_bit",
    "tests/engine/invariant/test_row_blocks.py",
]


@pytest.mark.slow
@pytest.mark.parametrize("branch", _branches())
def test_the_invariance_tests_pass_under_every_mkl_branch(branch):
    env = {**os.environ, "MKL_CBWR": branch, "ONEDNN_MAX_CPU_ISA": ONEDNN_ISA[branch]}
    done = run_pytest(UNDER_BRANCHES, env, "-x", "-k", "not bfloat16 and not gemma4 and not glm4")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
