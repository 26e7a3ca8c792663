"""The quantised kernels' self-check (models/quant/self_check.py) on an engine whose fixed-shape
decode graphs its bucket (GraphedDecode's CPU stand-in, tests/helpers/capture_hazards.py): before
the run, on the real rows of a probe prefill (engine/kernel_checks.py), every kernel the engine's
row counts can choose (one per tile) gets its one verdict, whatever rows the run meets later; the
graph is captured once, after, without the refused kernels, and the run gives no verdict.

The kernel is the FP8 Triton path of models/quant/cuda_kernels.py (run under TRITON_INTERPRET=1 on
CPU tensors, as tests/models/quant/test_self_check.py runs it) with one block scale read wrong.
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
from nudgeability.models.quant import cuda_kernels, self_check  # noqa: E402
from nudgeability.models.quant.compute import self_checked  # noqa: E402
from nudgeability.models.quant.fp8_linear import FP8BlockLinear, quantize_fp8_block  # noqa: E402
from nudgeability.models.testing.tiny import tiny_model  # noqa: E402
from nudgeability.util import fallbacks  # noqa: E402


def _with_a_wrong_fp8_kernel(model) -> None:
    """Layer 0's down projection as FP8 blocks, its Triton path reading one block scale x2."""
    name = "model.layers.0.mlp.down_proj"
    weight, scale_inv = quantize_fp8_block(
        model.get_submodule(name).weight.detach(), (32, 32), torch.float32
    )
    layer = FP8BlockLinear(weight, scale_inv, (32, 32))
    path = cuda_kernels.fp8_path(weight, scale_inv.clone(), (32, 32))
    path.tensors[0][0, 0] *= 2
    layer.fused = self_checked(path, layer)
    model.set_submodule(name, layer)


def test_every_tile_gets_its_verdict_before_the_run_and_the_graph_is_captured_after(
    monkeypatch,
):
    self_check.reset()
    fallbacks.reset()
    monkeypatch.setattr(static_decode, "flex_attention", block_sparse_flex)
    model = tiny_model("qwen3", num_layers=2)
    _with_a_wrong_fp8_kernel(model)
    engine = Engine(model, batch_invariant=False, static_decode=True, max_batch_tokens=16 * 40)
    dispatch = engine.static_dispatch
    dispatch.buckets = (16,)  # one bucket: the interpreter runs each kernel program in Python
    dispatch.graphs = graphs = HazardCheckedGraphs(engine)
    with pytest.warns(fallbacks.FallbackWarning):
        engine.capture()
    # triton_kernels.tile_for: BLOCK_M 16 up to 16 rows, 32 up to 32, then 64; each refused once
    refused = sorted(f.path.split("[")[1].split("x")[0] for f in fallbacks.taken())
    assert refused == ["16", "32", "64"], fallbacks.taken()
    assert all(f.used == "exact" for f in fallbacks.taken())
    assert self_check.refusals() == 3 and graphs.order == [16] and graphs.checked == {16}
    prompt = random_ids(40, seed=3)  # a prefill of 40 rows, then the bucket's steps
    (done,) = engine.generate([prompt], SamplingParams(max_new_tokens=4), return_logits=True)
    assert len(fallbacks.taken()) == 3 and graphs.order == [16]  # no verdict on the run
    assert engine.static_decode and engine.stats.decode_tokens > 0
    assert_matches_reference(model, done, prompt, 4, engine.eos_ids)
    self_check.reset()
    fallbacks.reset()
