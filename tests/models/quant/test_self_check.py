"""The self-check of the fused CUDA paths (self_check.py), driven on CPU under TRITON_INTERPRET=1:
a kernel made to compute wrong numbers (a corrupted block scale) is caught on its first run at a
shape, replaced for good by the exact path and recorded; a correct one is kept; each key is checked
once, not on every call.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 set before triton is imported", allow_module_level=True)
pytest.importorskip("triton")

from nudgeability.models.quant import cuda_kernels, self_check  # noqa: E402
from nudgeability.models.quant.compute import self_checked  # noqa: E402
from nudgeability.models.quant.fp8_linear import FP8BlockLinear, quantize_fp8_block  # noqa: E402
from nudgeability.util import fallbacks  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh():
    self_check.reset()
    fallbacks.reset()
    yield
    self_check.reset()
    fallbacks.reset()


def _fp8(n=96, k=160, seed=0):
    gen = torch.Generator().manual_seed(seed)
    weight, scale_inv = quantize_fp8_block(
        torch.randn(n, k, generator=gen), (32, 32), torch.float32
    )
    layer = FP8BlockLinear(weight, scale_inv, (32, 32))
    # the path gets its own copy of the scales, so that a test can corrupt them alone
    path = cuda_kernels.fp8_path(weight, scale_inv.clone(), (32, 32))
    return layer, path


def _counting(layer):
    """The layer with its dequantisation (the check's reference) counted."""
    calls = []
    original = layer.dequantize

    def dequantize(dtype=torch.float32):
        calls.append(dtype)
        return original(dtype)

    layer.dequantize = dequantize
    return calls


def test_a_kernel_with_a_corrupted_scale_falls_back_to_exact_for_good_and_is_recorded():
    layer, path = _fp8()
    (scale,) = path.tensors  # the fp32 block scales the kernel reads
    scale[1, 2] *= 2  # one block read wrong: what a misread layout does
    calls = _counting(layer)
    run = self_checked(path, layer).run
    x = torch.randn(5, 160, generator=torch.Generator().manual_seed(1))
    exact = layer.exact_no_bias(x)
    assert torch.equal(run(x), exact)
    (taken,) = fallbacks.taken()
    assert taken.path == "triton_fp8[16x64x64] fp8 [96, 160] block (32, 32) (float32)"
    assert taken.used == "exact" and "max |fused - exact|" in taken.reason
    assert taken.reason.endswith("at 5 rows")
    before = len(calls)
    assert torch.equal(run(x), exact)
    assert len(calls) == before + 1  # the exact path's own dequantisation: no second check
    # one verdict per kernel (its tile), whatever the rows: 1 row takes the same tile
    assert torch.equal(run(x[:1]), layer.exact_no_bias(x[:1]))
    assert run.ran == {"exact": {1, 8}} and len(fallbacks.taken()) == 1
    # another tile (BLOCK_M 64 past 32 rows: triton_kernels.tile_for) is its own kernel
    wide = torch.randn(40, 160, generator=torch.Generator().manual_seed(4))
    run(wide)
    assert [f.path.split()[0] for f in fallbacks.taken()][1:] == ["triton_fp8[64x64x64]"]


def test_probing_gives_every_tile_its_verdict_at_the_first_call():
    """Inside `probing(rows)` (the engine's check before its run, engine/kernel_checks.py) the
    first call, on 5 rows, judges every tile `choose` offers at those row counts, each once:
    a later call at other rows computes with what was judged, and checks nothing."""
    layer, path = _fp8()
    (scale,) = path.tensors
    scale[1, 2] *= 2
    calls = _counting(layer)
    run = self_checked(path, layer).run
    x = torch.randn(5, 160, generator=torch.Generator().manual_seed(1))
    with self_check.probing([1, 16, 17, 64, 300]):
        assert torch.equal(run(x), layer.exact_no_bias(x))
    tiles = sorted(f.path.split()[0] for f in fallbacks.taken())
    assert tiles == ["triton_fp8[16x64x64]", "triton_fp8[32x64x64]", "triton_fp8[64x64x64]"]
    # each at the largest probed row count that chooses it, up to CHECK_ROWS (256)
    rows = sorted(int(f.reason.rsplit(" ", 2)[1]) for f in fallbacks.taken())
    assert rows == [16, 17, 64] and self_check.refusals() == 3 and run.probed
    wide = torch.randn(40, 160, generator=torch.Generator().manual_seed(4))
    exact = layer.exact_no_bias(wide)
    before = len(calls)
    assert torch.equal(run(wide), exact)
    assert len(calls) == before + 1 and len(fallbacks.taken()) == 3  # no check, no verdict


def test_a_wrong_kernel_run_while_deferred_gets_its_verdict_at_the_next_real_call():
    """The capture warm-up's pad rows give no verdict (`deferred`): the key's first kernel runs
    unchecked there, and the first call outside it, on real rows, refuses it (`refusals` counts
    it, so that the engine captures its graphs again without it)."""
    layer, path = _fp8()
    (scale,) = path.tensors
    scale[0, 0] *= 2
    run = self_checked(path, layer).run
    x = torch.randn(5, 160, generator=torch.Generator().manual_seed(1))
    with self_check.deferred():
        wrong = run(x)
    assert not torch.equal(wrong, layer.exact_no_bias(x))  # ran, unchecked
    assert fallbacks.taken() == [] and self_check.refusals() == 0
    assert torch.equal(run(x), layer.exact_no_bias(x))
    assert self_check.refusals() == 1 and len(fallbacks.taken()) == 1


def test_a_kernel_that_raises_while_deferred_is_refused_at_once():
    """A warm-up must not take the engine down where a kernel raises (a Triton launch out of
    resources): the kernel is refused and recorded as at any check, and the next one runs."""
    layer, path = _fp8()

    def failing(x):
        raise RuntimeError("out of resources")

    broken = path.choose
    path = dataclasses.replace(
        path, choose=lambda x: [dataclasses.replace(k, run=failing) for k in broken(x)]
    )
    run = self_checked(path, layer).run
    x = torch.randn(5, 160, generator=torch.Generator().manual_seed(1))
    with self_check.deferred():
        assert torch.equal(run(x), layer.exact_no_bias(x))
    assert self_check.refusals() == 1
    (taken,) = fallbacks.taken()
    assert taken.used == "exact" and "raised RuntimeError: out of resources" in taken.reason


def test_a_correct_kernel_is_kept_and_checked_once_per_bucket():
    layer, path = _fp8()
    calls = _counting(layer)
    run = self_checked(path, layer).run
    x = torch.randn(7, 160, generator=torch.Generator().manual_seed(2))
    for rows in (7, 5, 8, 7):  # one bucket (8)
        y = run(x[:rows])
        ref = x[:rows].double() @ layer.dequantize().double().T
        assert (y.double() - ref).abs().max() <= 1e-5 * ref.abs().max()
    assert fallbacks.taken() == []
    assert run.ran == {"triton_fp8[16x64x64]": {8}}
    assert len(calls) == 1 + 4  # one check, and the four references computed here
    # a second layer of the same signature trusts the verdict
    other, other_path = _fp8(seed=9)
    other_calls = _counting(other)
    self_checked(other_path, other).run(x)
    assert other_calls == []


def test_the_bound_accepts_the_kernels_own_rounding_in_fp16():
    layer, path = _fp8()
    run = self_checked(path, layer).run
    x = torch.randn(33, 160, generator=torch.Generator().manual_seed(3)).to(torch.float16)
    run(x)
    assert fallbacks.taken() == [] and run.ran == {"triton_fp8[64x64x64]": {64}}


def test_the_disagreement_names_the_size_of_the_difference():
    weight = torch.eye(4)
    kernel = self_check.Kernel("k", lambda x: x)
    x = torch.ones(2, 4)
    assert self_check.disagreement(kernel, x, x.clone(), weight) is None
    wrong = x.clone()
    wrong[1, 3] = 1.5
    why = self_check.disagreement(kernel, x, wrong, weight)
    assert why.startswith("max |fused - exact| 0.5") and "row 1, output 3" in why
