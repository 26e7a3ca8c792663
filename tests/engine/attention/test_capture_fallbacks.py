"""What the fixed-shape decode does when the device or the compiler cannot run it: a capture that
fails (an invalidated capture, a Triton kernel out of shared memory, a Dynamo error in the
warm-up) or a compiled FlexAttention call that raises falls back loudly to the eager cascade,
recorded in the run's manifest, and never aborts the engine; an error of our own code still
raises. On CPU: the CUDA runtime's capture calls are stand-ins that raise what torch raises
there, the compiler's errors are raised by `torch.compile`'s callable or by `flex_attention`."""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch
from helpers.engine_reference import assert_matches_reference, random_ids
from helpers.sealed_fallbacks import manifest_fallbacks
from torch._dynamo.exc import FailOnRecompileLimitHit, Unsupported
from torch._inductor.exc import InductorError

from nudgeability.engine import Engine, SamplingParams
from nudgeability.engine.attention import static_decode
from nudgeability.engine.attention.decode_buckets import capture_order
from nudgeability.engine.attention.graphed_decode import GraphedDecode, with_greedy_head
from nudgeability.engine.scheduling.step_plan import StepPlan
from nudgeability.models.testing.tiny import tiny_model
from nudgeability.util import fallbacks

triton_errors = pytest.importorskip("triton.runtime.errors")


class _Stream:
    def wait_stream(self, other):
        pass


class _InvalidatedCapture:
    """`torch.cuda.graph` whose capture the device invalidated: its exit (`capture_end`, i.e.
    `cudaStreamEndCapture`) raises what torch raises for a failed CUDA call."""

    def __init__(self, graph, pool=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        raise torch.AcceleratorError(
            "CUDA error: operation failed due to a previous error during capture"
        )


@pytest.fixture
def cuda_runtime(monkeypatch):
    """The CUDA calls `GraphedDecode` makes, as CPU stand-ins whose capture is invalidated."""
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
    monkeypatch.setattr(torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", _Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", object)
    monkeypatch.setattr(torch.cuda, "graph", _InvalidatedCapture)
    fallbacks.reset()
    yield
    fallbacks.reset()


def _engine():
    model = tiny_model("llama", num_layers=2, seed=6)
    engine = Engine(model, static_decode=True, max_batch_tokens=16 * 40, max_rows=16)
    runner = engine.runner
    engine.static_dispatch.graphs = GraphedDecode(with_greedy_head(runner.forward, runner.logits))
    return model, engine


def _raises(error):
    def flex(*args, **kwargs):
        raise error

    return flex


@pytest.mark.parametrize(
    "flex_error, kind",
    [
        (None, "AcceleratorError"),  # the warm-up runs, the capture is invalidated
        (triton_errors.OutOfResources(232448, 116224, "shared memory"), "OutOfResources"),
        (Unsupported("a graph break under fullgraph=True"), "Unsupported"),
        (InductorError(RuntimeError("lowering failed"), None), "InductorError"),
    ],
)
def test_a_capture_that_fails_leaves_the_engine_eager_recorded(
    monkeypatch, cuda_runtime, tmp_path, flex_error, kind
):
    if flex_error is not None:
        monkeypatch.setattr(static_decode, "flex_attention", _raises(flex_error))
    model, engine = _engine()
    dispatch = engine.static_dispatch
    first = capture_order(dispatch.buckets)[0]
    with pytest.warns(fallbacks.FallbackWarning, match=kind):
        engine.capture()  # no exception
    assert not engine.static_decode and dispatch.graphs is None
    prefix, suffixes = random_ids(30, seed=9), [random_ids(n, seed=n) for n in (2, 4)]
    arms = engine.fork(prefix, suffixes, SamplingParams(max_new_tokens=6), return_logits=True)
    assert engine.stats.static_steps == 0
    for suffix, arm in zip(suffixes, arms):
        assert_matches_reference(model, arm, prefix + suffix, 6, engine.eos_ids)
    (taken,) = manifest_fallbacks(tmp_path / "run")
    assert taken["path"] == f"cuda graph of static_decode bucket {first}"
    assert taken["used"] == "eager cascade (step_attention)" and kind in taken["reason"]


def test_a_capture_that_succeeds_is_timed_and_records_nothing(monkeypatch, cuda_runtime):
    """The capture's host time per bucket (compile and capture), which `nudge plan` reports as
    start-up (costs/estimate/run_estimate.py `measure_run`). The capture alone: its stand-in
    graph cannot replay, which the engine's check of the captured step (`Engine.capture`) does."""

    class Captured(_InvalidatedCapture):
        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(torch.cuda, "graph", Captured)
    _, engine = _engine()
    engine.static_dispatch.capture_all(engine.pool, engine.cache, engine.pad_id)
    graphs = engine.static_dispatch.graphs
    assert engine.static_decode and sorted(graphs.seconds) == sorted(graphs.graphs) == [16]
    assert fallbacks.taken() == []


def test_an_error_of_our_own_in_the_capture_is_not_taken_for_a_fallback(monkeypatch, cuda_runtime):
    monkeypatch.setattr(static_decode, "flex_attention", _raises(TypeError("a bad argument")))
    _, engine = _engine()
    with pytest.raises(TypeError, match="a bad argument"):
        engine.capture()
    assert fallbacks.taken() == []


class _OnCuda:
    """A query as the compiled branch of `flex_decode_attention` reads it before the call: its
    device and head size (the call itself is `torch.compile`'s, which raises here)."""

    device = torch.device("cuda")

    def __init__(self, shape):
        self.shape = shape

    def index_select(self, dim: int, index: torch.Tensor) -> _OnCuda:
        """The gather into tile slots, as a tensor's would shape it."""
        shape = list(self.shape)
        shape[dim] = len(index)
        return _OnCuda(tuple(shape))


@pytest.mark.parametrize(
    "error",
    [
        Unsupported("a graph break under fullgraph=True"),
        InductorError(RuntimeError("lowering failed"), None),
        triton_errors.OutOfResources(232448, 116224, "shared memory"),
        FailOnRecompileLimitHit("recompile_limit reached"),
    ],
)
def test_the_compiled_flex_call_is_fullgraph_and_its_errors_are_recorded(
    monkeypatch, tmp_path, error
):
    fallbacks.reset()
    compiled = []

    def compile(fn, **options):
        compiled.append(options)
        return _raises(error)

    monkeypatch.setattr(torch, "compile", compile)
    monkeypatch.setattr(static_decode, "_compiled", None)
    model = tiny_model("llama", num_layers=1, seed=2)
    engine = Engine(model, static_decode=True, max_batch_tokens=16 * 20)
    static = engine.static_dispatch._static(16, engine.pool)
    static.load(StepPlan(), engine.pad_id)
    handle = SimpleNamespace(layout=static, k=torch.zeros(4, 8), v=torch.zeros(4, 8))
    with (
        pytest.raises(static_decode.StaticDecodeUnavailable),
        pytest.warns(fallbacks.FallbackWarning, match="static_decode flex_attention"),
    ):
        static_decode.flex_decode_attention(_OnCuda((1, 4, 16, 8)), handle, 1.0, None)
    assert compiled == [{"dynamic": False, "fullgraph": True}]
    (taken,) = manifest_fallbacks(tmp_path / "run")
    assert taken["path"] == "static_decode flex_attention (bucket 16, window None)"
    assert taken["used"] == "eager cascade (step_attention)"
    fallbacks.reset()
