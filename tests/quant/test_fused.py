"""The fused CPU kernels against the libraries' own dequantisation, within error bounds derived
from each kernel's arithmetic (never tuned); `dense` equal to `exact` bit for bit; the fallback.

The reference is y = x @ W.T in float64, W from `qt.reference_weights` (compressed-tensors'
decompression, bitsandbytes' `dequantize_4bit`, the FP8 formula). With S = |x| @ A.T, where A
bounds the magnitude of each weight term the kernel forms, and u the unit roundoff:

- fp32 kernels (the numba table kernels): products and sums in fp32 over K terms plus one scale
  multiply per block: |y - ref| <= gamma(K + 2) * S (+ u |ref| for a bias added after),
  gamma(n) = n u / (1 - n u), u = 2^-24.
- bf16 kernels: the activation rounded to bf16 (u_b = 2^-8), the weight's scale (and zero) rounded
  to bf16, bitsandbytes' kernel also rounds each dequantised weight to bf16, fp32 sums, and the
  output rounded to bf16: |y - ref| <= e S + u_b (|ref| + e S), e = (1 + u_b)^r (1 + gamma(K)) - 1,
  with r = 2 roundings for torch's int4 kernel (activation, scale/zero) and 3 for bitsandbytes'.
"""

from __future__ import annotations

import logging

import pytest
import torch

from nudgeability.models.quant import compute_paths, cpu_kernels, load_quantized
from nudgeability.models.quant.w4a16_linear import _fields, unpack_int32

U32, UB = 2.0**-24, 2.0**-8


def gamma(n: int, u: float = U32) -> float:
    return n * u / (1 - n * u)


ROWS = (1, 5, cpu_kernels.LUT_MAX_ROWS + 8)  # the last: the table kernels hand over to F.linear


def _check(layer, weight, magnitude, rows, bf16_roundings):
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, layer.in_features, generator=gen)
    with torch.no_grad():
        got = layer(x).double()
    ref = x.double() @ weight.double().T
    if layer.bias is not None:  # GLM's q/k/v projections have one (added after the kernel, in fp32)
        ref = ref + layer.bias.double()
    s = x.double().abs() @ magnitude.double().T
    k = layer.in_features
    if bf16_roundings:
        e = (1 + UB) ** bf16_roundings * (1 + gamma(k)) - 1
        bound = e * s + UB * (ref.abs() + e * s)
    else:
        bound = gamma(k + 2) * s + U32 * ref.abs()  # the last term: adding a bias
    assert bool(((got - ref).abs() <= bound).all()), ((got - ref).abs() / bound).max().item()
    return (got - ref).abs().max().item()


@pytest.mark.parametrize(
    "fmt", ["w4a16_g32_sym", "w4a16_g32_asym", "w4a16_g128_sym", "w4a16_channel_asym"]
)
def test_int4_kernel_is_within_its_bf16_bound_of_compressed_tensors_decompression(
    checkpoint, qt, fmt
):
    case = checkpoint("qwen3", fmt)
    model = load_quantized(case.directory, compute="fused")
    reference = qt.reference_weights(case.directory)
    for name, layer in qt.quantised_modules(model).items():
        assert layer.compute_path == "int4pack_mm_cpu(bf16)", name
        groups = layer.weight_scale.shape[1]
        q = _fields(layer.weight_packed, 4, layer.in_features).float() - 8
        zp = torch.zeros(layer.out_features, groups)
        if layer.weight_zero_point is not None:
            zp = unpack_int32(layer.weight_zero_point.t(), 4, layer.out_features).t().float()
        size = layer.in_features // groups
        terms = (
            q.abs() + zp.abs().repeat_interleave(size, 1)
        ) * layer.weight_scale.float().abs().repeat_interleave(size, 1)
        for rows in ROWS:
            _check(layer, reference[name], terms, rows, bf16_roundings=2)


@pytest.mark.parametrize("fmt", ["fp8_b128_bf16", "fp8_b32_f16", "fp8_b48x40_f32"])
def test_fp8_table_kernel_is_within_fp32_summation_of_the_fp8_formula(checkpoint, qt, fmt):
    case = checkpoint("gemma4", fmt)  # 128-blocks partial on 64/128-wide layers; 48x40 grids
    model = load_quantized(case.directory, compute="fused")
    reference = qt.reference_weights(case.directory)
    for name, layer in qt.quantised_modules(model).items():
        assert layer.compute_path == "lut_fp8_numba(fp32)", name
        for rows in ROWS:
            _check(layer, reference[name], reference[name].abs(), rows, bf16_roundings=0)


@pytest.mark.parametrize("fmt", ["bnb_nf4_dq", "bnb_nf4", "bnb_fp4_dq"])
@pytest.mark.parametrize("bitsandbytes_kernel", [True, False])
def test_4bit_kernels_are_within_their_bounds_of_dequantize_4bit(
    checkpoint, qt, monkeypatch, fmt, bitsandbytes_kernel
):
    if bitsandbytes_kernel and not cpu_kernels.bnb_has_cpu_kernel():
        pytest.skip("bitsandbytes' fused CPU kernel needs AVX512-BF16")
    if not bitsandbytes_kernel:  # the numba kernel, as on CPUs without AVX512-BF16
        monkeypatch.setattr(cpu_kernels, "bnb_has_cpu_kernel", lambda: False)
    case = checkpoint("glm4", fmt)
    model = load_quantized(case.directory, compute="fused")
    reference = qt.reference_weights(case.directory)
    want = "bnb_gemv_4bit_cpu(bf16)" if bitsandbytes_kernel else "lut_4bit_numba(fp32)"
    for name, layer in qt.quantised_modules(model).items():
        assert layer.compute_path == want, name
        for rows in ROWS:
            _check(
                layer, reference[name], reference[name].abs(), rows, 3 if bitsandbytes_kernel else 0
            )


@pytest.mark.parametrize("fmt", ["fp8_b32_f16", "w4a16_g32_asym", "bnb_nf4_dq"])
def test_dense_computes_exactly_what_exact_computes(checkpoint, qt, fmt):
    case = checkpoint("qwen3", fmt)
    ids = torch.randint(3, 300, (2, 20), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        exact = load_quantized(case.directory, compute="exact")(ids).logits
        dense_model = load_quantized(case.directory, compute="dense")
        dense = dense_model(ids).logits
    assert torch.equal(exact, dense)
    assert set(next(iter(compute_paths(dense_model).values()))) == {"dense"}


def test_layers_no_kernel_takes_stay_exact_named_in_one_warning(checkpoint, qt, caplog):
    case = checkpoint("qwen3", "w8a16_g32_asym")  # 8-bit: torch's int4 kernel does not apply
    with caplog.at_level(logging.WARNING, logger="nudgeability.models.quant.compute"):
        model = load_quantized(case.directory, compute="fused")
    (record,) = [r for r in caplog.records if "no fused kernel" in r.getMessage()]
    message = record.getMessage()
    assert "28 quantised layer(s)" in message
    assert "model.layers.0.self_attn.q_proj (8-bit weights)" in message
    assert compute_paths(model) == {"w4a16": {"exact": 28}}
    reference = qt.reference_model(case.model, qt.reference_weights(case.directory))
    ids = torch.randint(3, 300, (1, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert qt.rel_diff(model(ids).logits, reference(ids).logits) <= 1e-5


def test_fused_layers_keep_the_checkpoint_storage_that_dequantize_reads(checkpoint, qt):
    case = checkpoint("qwen3", "w4a16_g32_asym")
    model = load_quantized(case.directory, compute="fused")
    reference = qt.reference_weights(case.directory)
    for name, layer in qt.quantised_modules(model).items():  # dequantize() still reads them
        assert torch.equal(layer.dequantize(), reference[name]), name
