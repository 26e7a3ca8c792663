"""The fused layers' check before the run (engine/fused/first_step.py, on a probe prefill) catches a
kernel bug that the capture warm-up's pad step cannot show.

A bug is injected into the launch of the fused q/k norm + rotary kernel (engine/fused/
triton_ops.py `norm_rope`, run under TRITON_INTERPRET=1 on CPU tensors): every token reading
token 0's cos/sin (a wrong cos/sin index), or token 0's row of q/k (a row-stride bug). On the
warm-up's step, pad tokens at position 0 of identical rows, the buggy kernel computes exactly
what the right one does, so the check the runner used to make there (the hidden states within
0.1 of their largest |value|, engine/attention/graphed_decode.py `agrees`) passed it; on a real
step (the probe's) the check refuses it, the fallback is recorded and the engine's tokens are HF's.
"""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 set before triton is imported", allow_module_level=True)
pytest.importorskip("triton")

from helpers.capture_hazards import HazardCheckedGraphs, block_sparse_flex  # noqa: E402
from helpers.engine_reference import assert_matches_reference, random_ids  # noqa: E402

from nudgeability.engine import Engine, SamplingParams  # noqa: E402
from nudgeability.engine.attention import static_decode  # noqa: E402
from nudgeability.engine.attention.graphed_decode import SELF_CHECK_BOUND  # noqa: E402
from nudgeability.engine.fused import first_step, layers  # noqa: E402
from nudgeability.engine.fused import triton_ops as ops  # noqa: E402
from nudgeability.models.testing.tiny import tiny_model  # noqa: E402
from nudgeability.util import fallbacks  # noqa: E402

# positional arguments of the norm_rope kernel's launch (triton_ops.py `norm_rope`)
STRIDE_X_TOKEN, STRIDE_COS_TOKEN, STRIDE_SIN_TOKEN = 5, 7, 8
BUGS = {
    "cos/sin of token 0 for every token": (STRIDE_COS_TOKEN, STRIDE_SIN_TOKEN),
    "q/k row of token 0 for every token": (STRIDE_X_TOKEN,),
}
PATH = "fused layer kernels (engine/fused/)"


class _BuggyLaunch:
    """The norm_rope kernel, launched with the strides at `zeroed` set to 0."""

    def __init__(self, kernel, zeroed):
        self.kernel, self.zeroed = kernel, zeroed

    def __getitem__(self, grid):
        launch = self.kernel[grid]

        def run(*args, **kwargs):
            args = [0 if i in self.zeroed else a for i, a in enumerate(args)]
            return launch(*args, **kwargs)

        return run


@pytest.fixture(params=sorted(BUGS))
def buggy_kernel(request, monkeypatch):
    triton, kernels = ops._kernels()
    broken = dict(kernels, norm_rope=_BuggyLaunch(kernels["norm_rope"], BUGS[request.param]))
    monkeypatch.setattr(ops, "_kernels", lambda: (triton, broken))
    fallbacks.reset()
    yield request.param
    fallbacks.reset()


def _hidden(model, ids: torch.Tensor, positions: torch.Tensor, fused: bool) -> torch.Tensor:
    with torch.no_grad(), layers.fused_forward() if fused else torch.no_grad():
        return model.model(input_ids=ids, position_ids=positions).last_hidden_state


def test_the_pad_step_hides_the_bug_and_a_real_step_shows_it(buggy_kernel):
    model = tiny_model("qwen3", num_layers=2)
    layers.fuse(model)
    head = model.get_output_embeddings()
    # the capture warm-up's step: 16 pad rows, one token each at position 0
    pads = torch.zeros(16, 1, dtype=torch.long)
    fused, library = (_hidden(model, pads, torch.zeros_like(pads), f) for f in (True, False))
    scale = library.float().abs().amax()
    old_check = ((fused.float() - library.float()).abs().amax() / scale).item()
    assert old_check <= SELF_CHECK_BOUND[torch.float32]  # what the runner used to check: passed
    assert not first_step.conclusive(pads, torch.zeros_like(pads))
    # a real step: a prompt's tokens at their positions
    ids = torch.tensor([random_ids(9, seed=3)])
    positions = torch.arange(9)[None]
    fused, library = (_hidden(model, ids, positions, f) for f in (True, False))
    assert first_step.conclusive(ids, positions)
    assert first_step.disagreement(fused, library, lambda h: head(h).float()) is not None


@pytest.mark.parametrize("buggy_kernel", ["cos/sin of token 0 for every token"], indirect=True)
def test_the_engine_refuses_the_buggy_kernel_before_its_first_step(buggy_kernel, monkeypatch):
    """An engine whose fixed-shape decode graphs its bucket (GraphedDecode's CPU stand-in,
    tests/helpers/capture_hazards.py): its check before the run (engine/kernel_checks.py, on a
    probe prefill) refuses the kernel, the fallback is recorded, the graph is captured once,
    after the check, without it, and every token and logit of the run is HF's."""
    monkeypatch.setattr(static_decode, "flex_attention", block_sparse_flex)
    model = tiny_model("qwen3", num_layers=2)
    layers.fuse(model)
    engine = Engine(model, batch_invariant=False, static_decode=True, max_batch_tokens=16 * 40)
    engine.runner.fused, engine.runner._fused_checked = True, False  # as on CUDA
    dispatch = engine.static_dispatch
    dispatch.buckets = (16,)  # one bucket: the interpreter runs each kernel program in Python
    dispatch.graphs = graphs = HazardCheckedGraphs(engine)
    with pytest.warns(fallbacks.FallbackWarning, match="fused layer kernels"):
        engine.capture()
    assert engine.runner.fused is False
    assert [f.path for f in fallbacks.taken()] == [PATH]
    assert graphs.order == [16] and graphs.checked == {16}  # captured after the check, checked
    assert engine.pool.in_use == 0 and engine.stats.steps == 0  # the probes left nothing
    prompt = random_ids(9, seed=3)
    (done,) = engine.generate([prompt], SamplingParams(max_new_tokens=4), return_logits=True)
    assert graphs.order == [16] and graphs.replays > 0 and not graphs.hazards
    assert engine.stats.decode_tokens > 0 and engine.static_decode
    assert_matches_reference(model, done, prompt, 4, engine.eos_ids)


def test_the_bound_is_the_elements_own_not_the_largest_one():
    """An outlier dimension 100x the row's rms must not hide an O(1) error on the others, as
    0.1 x max |hidden| did; a few units of bf16's last place on every element pass."""
    torch.manual_seed(0)
    library = torch.randn(1, 8, 256).to(torch.bfloat16)
    library[..., 7] = 100.0
    logits = lambda h: h.float() @ torch.eye(256)  # noqa: E731
    off = library.clone()
    off[..., :7] += 1.0
    assert first_step.disagreement(off, library, logits) is not None
    scale = library.float().abs().amax()
    assert ((off.float() - library.float()).abs().amax() / scale).item() <= 0.1  # the old bound
    ulps = (library.float() * (1 + 4 * 2.0**-8)).to(torch.bfloat16)
    assert first_step.disagreement(ulps, library, logits) is None
