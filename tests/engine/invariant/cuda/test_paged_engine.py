"""The engine with its row tokens and prefix chunks on the paged kernel
(engine/invariant/cuda/paged_attention.py), forced on CPU tensors through the one switch the
engine reads (engine/invariant/cuda/mode.py `paged_on`) and run in Triton's interpreter, its `tl.dot` a k-ascending chain
(tests/engine/invariant/cuda/conftest.py), on a 2-layer model in fp32: HF's greedy tokens and logits; a token
decoded equals the same token fed inside a prefill chunk; a run preempted equals one that is
not; a stem recomputed, copied from its base, and read as a view of a trunk give the same bits.
The linears are the CPU's invariant products (engine/invariant/cpu/), so what these compare
beyond them is the attention's order."""

from __future__ import annotations

import pytest
import torch
from helpers.capture_hazards import HazardCheckedGraphs
from helpers.engine_reference import assert_matches_reference, random_ids

import nudgeability.engine.invariant.cuda.paged_attention as paged
from nudgeability.engine import Engine, ForkRequest, SamplingParams
from nudgeability.engine.invariant.cuda import mode
from nudgeability.models.testing.tiny import tiny_model

pytestmark = pytest.mark.usefixtures("ordered_dot", "paged_on")

PROMPT = random_ids(14, seed=31)
SUFFIX = random_ids(3, seed=32)


@pytest.fixture(scope="module")
def model():
    return tiny_model("qwen3", num_layers=2, seed=4)


@pytest.fixture
def paged_on(monkeypatch):
    """The paged kernel on, for CPU tensors (elsewhere the runner's Triton branch turns it on)."""
    monkeypatch.setattr(mode, "paged_on", lambda runner: True)


@pytest.fixture
def launches(count_calls):
    """How often each of the kernel's entry points ran (the engine must reach them)."""
    return count_calls(paged, ("row_attention", "chunk_attention", "static_decode_attention"))


def paged_engine(model, **options) -> Engine:
    return Engine(model, **options)


def params(tokens: int) -> SamplingParams:
    return SamplingParams(max_new_tokens=tokens, ignore_eos=True)


def assert_same_bits(a, b) -> None:
    assert a.token_ids == b.token_ids
    assert torch.equal(a.logits, b.logits)


def test_hf_tokens_and_a_decoded_token_equals_it_in_a_prefill_chunk(model, launches):
    """Arm A decodes 5 tokens; arm B's context is A's suffix and first two tokens, fed as one
    prefill chunk beside another arm: B's first logits are bitwise A's third, and A's tokens and
    logits are HF's."""
    engine = paged_engine(model)
    (a,) = engine.fork(PROMPT, [SUFFIX], params(5), return_logits=True)
    assert_matches_reference(model, a, PROMPT + SUFFIX, 5, engine.eos_ids)
    fed = SUFFIX + a.token_ids[:2]
    b, _ = engine.fork(PROMPT, [fed, random_ids(6, seed=33)], params(3), return_logits=True)
    assert b.token_ids == a.token_ids[2:]
    assert torch.equal(b.logits, a.logits[2:])
    assert launches["row_attention"] > 0 and launches["chunk_attention"] > 0


def test_preempted_equals_not(model, launches):
    """Three arms under a pool too small for all of them (rows preempted and recomputed into
    other blocks) give the bits of the same arms with room to spare."""
    suffixes = [random_ids(n, seed=40 + n) for n in (2, 5, 3)]
    free = paged_engine(model).fork(PROMPT, suffixes, params(7), return_logits=True)
    tight = paged_engine(model, max_batch_tokens=36, block_size=4)
    squeezed = tight.fork(PROMPT, suffixes, params(7), return_logits=True)
    assert tight.stats.preemptions > 0
    for x, y in zip(free, squeezed):
        assert_same_bits(x, y)


def test_stem_recomputed_copied_or_a_trunk_view(model, launches):
    """A fork at a base's third generated token: its stem computed, copied from the retained
    base, or read as a view of a longer trunk; the arms' bits are the same each way."""
    engine = paged_engine(model)
    base = engine.submit_generate(PROMPT, params(6), retain=True)
    while engine.busy:
        engine.step()
    made = engine.peek(base)
    cut, trunk = 3, 6
    arms = [random_ids(2, seed=50), random_ids(4, seed=51)]

    def fork(**how) -> list:
        request = ForkRequest(PROMPT + made[:cut], arms, params(3), stem=cut + 1, **how)
        refs = engine.submit_fork(request, return_logits=True)
        done = {}
        while engine.busy:
            done.update((r.id, c) for r, c in engine.step())
        return [done[r.id] for r in refs]

    computed = fork()
    copied = fork(reuse=base)
    viewed = fork(trunk=trunk, trunk_ids=PROMPT[-1:] + made[: trunk - 1])
    for x, y, z in zip(computed, copied, viewed):
        assert_same_bits(x, y)
        assert_same_bits(x, z)
    for suffix, arm in zip(arms, computed):
        assert_matches_reference(model, arm, PROMPT + made[:cut] + suffix, 3, engine.eos_ids)
    engine.release(base)


def test_fixed_shape_decode_runs_the_same_kernel(model, launches):
    """The fixed-shape decode (static_decode.py, its tables buffers of a 16-row bucket), run as
    a captured graph would be (tests/helpers/capture_hazards.py: every tensor the kernel is
    handed a persistent buffer or made in the step, no host sync), gives arms of two groups
    bitwise the eager steps' tokens and logits: decode and prefill rows run one kernel, on
    tables laid out two ways."""
    requests = [
        ForkRequest(PROMPT, [SUFFIX, random_ids(5, seed=60)], params(3)),
        ForkRequest(random_ids(9, seed=61), [random_ids(2, seed=62)], params(3)),
    ]
    eager = paged_engine(model).fork_many(requests, return_logits=True)
    engine = paged_engine(model, static_decode=True, max_rows=16)  # one bucket to capture
    engine.static_dispatch.graphs = graphs = HazardCheckedGraphs(engine)
    fixed = engine.fork_many(requests, return_logits=True)
    assert engine.stats.static_steps > 0 and launches["static_decode_attention"] > 0
    assert graphs.replays > 0 and not graphs.hazards, graphs.hazards[:3]
    for x, y in zip(eager, fixed):
        for a, b in zip(x, y):
            assert_same_bits(a, b)
