"""The batch-invariant GEMMs (engine/invariant/cuda/products.py) against y = x @ W.T in float64,
W the format's weight from another path than the kernel's (tests/helpers/quant_layers.py), under
the interpreter's own dot, at the plan's tile (a K split included) and partial tiles on every side.

Per output: |y - ref| <= (e + gamma(K + 2)) * (|x| @ |W|.T) + u * |ref|, with gamma the fp32
sums' bound, e the rounding of the decoded weight to the activations' dtype (2^-11 fp16; fp32:
2^-24, the decode's one fp32 product), u the output's rounding (fp16's 2^-11; none in fp32).
"""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 set before triton is imported", allow_module_level=True)
pytest.importorskip("triton")

from nudgeability.engine.invariant.cuda import products  # noqa: E402

U = {torch.float32: 2.0**-24, torch.float16: 2.0**-11}
N, K = 80, 256


def _assert_within(y, x, weight):
    xd = x.double()
    ref = xd @ weight.T
    gamma = (K + 2) * 2.0**-24 / (1 - (K + 2) * 2.0**-24)
    u = U[x.dtype]
    out = 0.0 if x.dtype == torch.float32 else u
    bound = (u + gamma) * (xd.abs() @ weight.abs().T) + out * ref.abs()
    assert y.dtype == x.dtype and y.shape == ref.shape
    over = (y.double() - ref).abs() - bound
    assert bool((over <= 0).all()), f"{int((over > 0).sum())} outputs over the bound"


def _x(rows, dtype):
    gen = torch.Generator().manual_seed(rows)
    return torch.randn(rows, K, generator=gen).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("rows", [3, 70])
def test_dense(dtype, rows):
    gen = torch.Generator().manual_seed(5)
    weight = (torch.randn(N, K, generator=gen) / 16).to(dtype)
    x = _x(rows, dtype)
    _assert_within(products.linear(x, weight), x, weight.double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("fmt", ["w4a16", "fp8", "bnb4"])
def test_quantised(fmt, dtype):
    from helpers import quant_layers

    if fmt == "bnb4":
        pytest.importorskip("bitsandbytes")
    layer, weight = getattr(quant_layers, f"{fmt}_layer")(N, K)
    x = _x(70, dtype)
    _assert_within(products.quantised(layer, x), x, weight)
