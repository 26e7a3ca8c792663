"""The fused CPU paths of whole checkpoints against the libraries' own dequantisation, within
error bounds derived from each kernel's arithmetic (never tuned); `dense` equal to `exact` bit for
bit; the fallback. (tests/models/quant/test_simd_kernels.py tests the fp32 kernels on random shapes.)

The reference is y = x @ W.T in float64, W from `qt.reference_weights` (compressed-tensors'
decompression, bitsandbytes' `dequantize_4bit`, the FP8 formula). With S = |x| @ A.T, where A
bounds the magnitude of each weight term the kernel forms, and u the unit roundoff:

- fp32 kernels (`fused`): the library's weights exactly, each product in one lane's chain of
  K/32 fused multiply-adds, then 5 additions: |y - ref| <= gamma(K/32 + 5) * S (+ u |ref| for a
  bias added after), gamma(n) = n u / (1 - n u), u = 2^-24, A = |W|.
- bf16 kernels (`fused-bf16`): the activation rounded to bf16 (u_b = 2^-8), the weight's scale (and zero) rounded
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


ROWS = (1, 5, 12, 100)  # the last: every fp32 kernel hands over to F.linear


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
        bound = gamma(k // 32 + 5) * s + U32 * ref.abs()  # the last term: adding a bias
    assert bool(((got - ref).abs() <= bound).all()), ((got - ref).abs() / bound).max().item()
    return (got - ref).abs().max().item()


def _layers(checkpoint, qt, arch: str, fmt: str, compute: str):
    """(name, layer, reference weight) of each quantised linear of the tiny `arch` checkpoint in
    `fmt`, loaded with `compute`; the weight dequantised by the library (`qt.reference_weights`)."""
    directory = checkpoint(arch, fmt).directory
    model = load_quantized(directory, compute=compute)
    reference = qt.reference_weights(directory)
    return [(name, layer, reference[name]) for name, layer in qt.quantised_modules(model).items()]


W4A16_FORMATS = ["w4a16_g32_sym", "w4a16_g32_asym", "w4a16_g128_sym", "w4a16_channel_asym"]


@pytest.mark.parametrize("fmt", W4A16_FORMATS + ["w4a16_g32_asym_from_bf16"])
def test_w4a16_fp32_kernel_is_within_fp32_summation_of_compressed_tensors_decompression(
    checkpoint, qt, fmt
):
    for name, layer, weight in _layers(checkpoint, qt, "qwen3", fmt, "fused"):
        assert layer.compute_path == "w4a16_simd(fp32)", name
        for rows in ROWS:
            _check(layer, weight, weight.abs(), rows, bf16_roundings=0)


@pytest.mark.parametrize("fmt", W4A16_FORMATS)
def test_int4_kernel_is_within_its_bf16_bound_of_compressed_tensors_decompression(
    checkpoint, qt, fmt
):
    for name, layer, weight in _layers(checkpoint, qt, "qwen3", fmt, "fused-bf16"):
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
            _check(layer, weight, terms, rows, bf16_roundings=2)


@pytest.mark.parametrize("compute", ["fused", "fused-bf16"])  # FP8 has no bf16 CPU kernel
@pytest.mark.parametrize("fmt", ["fp8_b128_bf16", "fp8_b32_f16", "fp8_b128_from_bf16"])
def test_fp8_kernel_is_within_fp32_summation_of_the_fp8_formula(checkpoint, qt, fmt, compute):
    # 128-blocks partial on 64/128-wide layers; 32x32 grids
    for name, layer, weight in _layers(checkpoint, qt, "gemma4", fmt, compute):
        # Gemma 4's per-layer projections have 8 inputs here (256 in the real models): the fp32
        # kernels need multiples of 32, so those keep the exact path
        want = "fp8_simd(fp32)" if layer.in_features % 32 == 0 else "exact"
        assert layer.compute_path == want, name
        for rows in ROWS:
            _check(layer, weight, weight.abs(), rows, bf16_roundings=0)


@pytest.mark.parametrize("fmt", ["bnb_nf4_dq", "bnb_nf4", "bnb_fp4_dq", "bnb_nf4_dq_from_bf16"])
@pytest.mark.parametrize("compute", ["fused", "fused-bf16"])
def test_4bit_kernels_are_within_their_bounds_of_dequantize_4bit(checkpoint, qt, fmt, compute):
    bitsandbytes_kernel = compute == "fused-bf16" and cpu_kernels.bnb_has_cpu_kernel()
    want = "bnb_gemv_4bit_cpu(bf16)" if bitsandbytes_kernel else "nibble_table_simd(fp32)"
    for name, layer, weight in _layers(checkpoint, qt, "glm4", fmt, compute):
        assert layer.compute_path == want, name
        for rows in ROWS:
            _check(layer, weight, weight.abs(), rows, 3 if bitsandbytes_kernel else 0)


def test_without_avx512_bf16_fused_bf16_takes_the_fp32_4bit_kernel(checkpoint, qt, monkeypatch):
    monkeypatch.setattr(cpu_kernels, "bnb_has_cpu_kernel", lambda: False)
    model = load_quantized(checkpoint("glm4", "bnb_nf4_dq").directory, compute="fused-bf16")
    assert set(compute_paths(model)["bnb4"]) == {"nibble_table_simd(fp32)"}


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


@pytest.mark.parametrize(
    "fmt, why",
    [
        ("w8a16_g32_asym", "model.layers.0.self_attn.q_proj (8-bit weights)"),
        # 40-wide blocks: the FP8 kernel needs block widths in multiples of 16
        ("fp8_b48x40_f32", "model.layers.0.self_attn.q_proj (groups of 40 inputs"),
    ],
)
def test_layers_no_kernel_takes_stay_exact_named_in_one_warning(checkpoint, qt, caplog, fmt, why):
    case = checkpoint("qwen3", fmt)
    with caplog.at_level(logging.WARNING, logger="nudgeability.models.quant.compute"):
        model = load_quantized(case.directory, compute="fused")
    (record,) = [r for r in caplog.records if "no fused kernel" in r.getMessage()]
    message = record.getMessage()
    assert "28 quantised layer(s)" in message
    assert why in message
    assert list(compute_paths(model).values()) == [{"exact": 28}]
    reference = qt.reference_model(case.model, qt.reference_weights(case.directory))
    ids = torch.randint(3, 300, (1, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert qt.rel_diff(model(ids).logits, reference(ids).logits) <= 1e-5


def test_fused_layers_keep_the_checkpoint_storage_that_dequantize_reads(checkpoint, qt):
    # dequantize() still reads the checkpoint's tensors
    for name, layer, weight in _layers(checkpoint, qt, "qwen3", "w4a16_g32_asym", "fused"):
        assert torch.equal(layer.dequantize(), weight), name
