"""The checks that choose a run's kernels leave no trace in the run (engine/kernel_checks.py): an
engine that makes them before its first step, on scratch blocks of its pool, then runs a fork,
holds the same K/V in every slot of its pool and gives the same logits, bit for bit, as an engine
on which they were already made. The CUDA branch runs on CPU tensors: the fused layers under
TRITON_INTERPRET=1 (forced on as on CUDA), a quantised layer on its self-checked FP8 Triton path
(models/quant/self_check.py), and the graphed decode through its CPU stand-in
(tests/helpers/cuda_standins.py `CapturedDecode`, whose replay is the real fixed-shape step).

Negative control: the fused check made on the run's first step instead (the library's K/V kept
for that step, as before the checks moved) leaves the prefix's K/V different from the checked
engine's.
"""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 set before triton is imported", allow_module_level=True)
pytest.importorskip("triton")

from helpers.cuda_standins import CapturedDecode  # noqa: E402
from helpers.engine_reference import random_ids  # noqa: E402

from nudgeability.engine import Engine, ForkRequest, SamplingParams  # noqa: E402
from nudgeability.engine.fused import layers  # noqa: E402
from nudgeability.models.quant import cuda_kernels, self_check  # noqa: E402
from nudgeability.models.quant.compute import self_checked  # noqa: E402
from nudgeability.models.quant.fp8_linear import FP8BlockLinear, quantize_fp8_block  # noqa: E402
from nudgeability.models.testing.tiny import tiny_model  # noqa: E402
from nudgeability.util import fallbacks  # noqa: E402

PREFIX, SUFFIXES = random_ids(10, seed=41), [random_ids(n, seed=40 + n) for n in (1, 3)]


def _engine() -> Engine:
    """A 1-layer qwen3 (the interpreter runs each kernel program in Python) with its down
    projection as FP8 blocks on the Triton path, its fused layers on and unchecked, its one
    bucket graphed by the stand-in."""
    model = tiny_model("qwen3", num_layers=1)
    name = "model.layers.0.mlp.down_proj"
    weight, scale_inv = quantize_fp8_block(
        model.get_submodule(name).weight.detach(), (32, 32), torch.float32
    )
    layer = FP8BlockLinear(weight, scale_inv, (32, 32))
    layer.fused = self_checked(cuda_kernels.fp8_path(weight, scale_inv, (32, 32)), layer)
    model.set_submodule(name, layer)
    layers.fuse(model)
    engine = Engine(
        model, batch_invariant=False, static_decode=True, max_batch_tokens=16 * 40, max_rows=16
    )
    engine.runner.fused, engine.runner._fused_checked = True, False  # as on CUDA
    engine.static_dispatch.graphs = CapturedDecode(engine)
    return engine


def _run(engine: Engine):
    arms = engine.fork(PREFIX, SUFFIXES, SamplingParams(max_new_tokens=3), return_logits=True)
    return [arm.logits for arm in arms], [arm.token_ids for arm in arms]


def _same_pool(a: Engine, b: Engine) -> bool:
    return all(
        (x is None and y is None) or torch.equal(x, y)
        for x, y in zip(a.pool.k + a.pool.v, b.pool.k + b.pool.v)
    )


@pytest.fixture
def fresh():
    self_check.reset()
    fallbacks.reset()
    yield
    self_check.reset()
    fallbacks.reset()


def test_the_checks_leave_no_trace_in_the_runs_pool_or_logits(fresh):
    checking = _engine()
    checking.capture()  # the three checks, on probe forks
    graphs = checking.static_dispatch.graphs
    assert checking.runner.fused and checking.runner._fused_checked and graphs.checked == {16}
    assert self_check.refusals() == 0 and not fallbacks.taken()
    assert checking.pool.in_use == 0 and not checking.pool.k[0].any()  # scratch: zeros again
    logits, tokens = _run(checking)

    checked = _engine()  # the same checks already made: the verdicts, the graph's agreement
    checked.runner._fused_checked = True
    checked.model.get_submodule("model.layers.0.mlp.down_proj").fused.run.probed = True
    checked.static_dispatch.graphs.checked.add(16)
    runs = checked.static_dispatch.graphs.runs
    checked_logits, checked_tokens = _run(checked)
    assert checked.static_dispatch.graphs.runs > runs  # the run replayed the graph
    assert checking.stats.static_steps == checked.stats.static_steps > 0
    assert checked_tokens == tokens
    assert all(torch.equal(x, y) for x, y in zip(checked_logits, logits))
    assert _same_pool(checking, checked)

    # negative control: the fused check on the run's first step (the prefix's prefill) keeps the
    # library's K/V in the prefix's slots, which the checked engine wrote with the fused kernels
    on_run = _engine()
    on_run.model.get_submodule("model.layers.0.mlp.down_proj").fused.run.probed = True
    on_run.static_dispatch.graphs.checked.add(16)
    on_run._captured = True  # no check before the run
    on_run.submit_fork(ForkRequest(PREFIX, SUFFIXES, SamplingParams(max_new_tokens=3)))
    with on_run.runner.checking():
        on_run.step()
    assert on_run.runner.fused and on_run.runner._fused_checked
    (group,) = on_run.scheduler.admitted
    prefix = slice(group.own.start, group.own.start + len(PREFIX))
    assert not torch.equal(on_run.pool.k[0][:, prefix], checked.pool.k[0][:, prefix])
