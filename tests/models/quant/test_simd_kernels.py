"""The fp32 SIMD kernels (models/quant/numba_kernels.py) against the libraries' own dequantisation.

Layers of random shapes are built from the libraries' own quantisers (compressed-tensors'
`PackedQuantizationCompressor.compress`, bitsandbytes' `quantize_4bit`, the FP8 block writer) and
compared with the libraries' own dequantisation (`decompress`, `dequantize_4bit`, the FP8 formula
with explicit indices):

- each decoded weight is the library's value bit for bit: with identity activations every output
  is one product x * w = w, so out == W.T exactly (in the activations' dtype);
- with random activations, |y - x @ W.T| <= gamma(K/32 + 5) * (|x| @ |W|.T): every product enters
  one lane's chain of K/32 fused multiply-adds, then one addition of the two half-chunk lanes and
  the four pairwise additions of `vsum` (gamma(n) = n u / (1 - n u), u = 2^-24); for bf16
  activations the output's rounding adds u_bf16 (|ref| + that bound);
- a row's output does not depend on the rows it is computed with (same fixed order);
- the AVX2 and the portable 16-entry lookups give the AVX-512 results bit for bit.

The kernels compute every row count here: the prefill hand-over (`SIMD_MAX_ROWS`) is patched away.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import sys

import pytest
import torch

from nudgeability.engine.invariant.linears import adopt, invariant_forward
from nudgeability.models.quant import BnB4Linear, FP8BlockLinear, PackQuantizedLinear, cpu_kernels
from nudgeability.models.quant.fp8_linear import quantize_fp8_block

U32, UB = 2.0**-24, 2.0**-8
ROWS = (1, 2, 5, 12, 33, 64)

pytestmark = pytest.mark.skipif(
    cpu_kernels.simd_cpu_reason() is not None, reason=str(cpu_kernels.simd_cpu_reason())
)


def gamma(n: int) -> float:
    return n * U32 / (1 - n * U32)


def w4a16_layer(out_f, in_f, group, symmetric, scale_dtype, seed):
    """A compressed-tensors layer packed by the library, and the library's decompressed weight."""
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.utils import calculate_qparams

    gen = torch.Generator().manual_seed(seed)
    w = (torch.randn(out_f, in_f, generator=gen) * 0.05).to(scale_dtype)
    args = QuantizationArgs(
        num_bits=4, type="int", symmetric=symmetric, strategy="group", group_size=group
    )
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    grouped = w.unflatten(-1, (in_f // group, group))
    scale, zero_point = calculate_qparams(grouped.amin(-1), grouped.amax(-1), args)
    state = {"weight": w, "weight_scale": scale.to(scale_dtype)}
    if not symmetric:
        state["weight_zero_point"] = zero_point
    packed = PackedQuantizationCompressor.compress(state, scheme)
    reference = PackedQuantizationCompressor.decompress(packed, scheme)["weight"]
    layer = PackQuantizedLinear(
        packed["weight_packed"],
        packed["weight_scale"],
        packed["weight_shape"],
        4,
        packed.get("weight_zero_point"),
    )
    return layer, reference


def nibble_layer(out_f, in_f, blocksize, quant_type, double_quant, dtype, seed):
    """A bitsandbytes layer from `quantize_4bit` and its `dequantize_4bit`; where blocks straddle
    rows, bitsandbytes' pure-torch dequantisation (its CPU C kernel misreads those on AVX-512, see
    `test_bitsandbytes_cpu_dequantisation_depends_on_the_cpu`)."""
    from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
    from bitsandbytes.functional import dequantize_4bit, dequantize_blockwise, quantize_4bit

    gen = torch.Generator().manual_seed(seed)
    w = (torch.randn(out_f, in_f, generator=gen) * 0.05).to(dtype)
    packed, state = quantize_4bit(
        w, blocksize=blocksize, compress_statistics=double_quant, quant_type=quant_type
    )
    if in_f % blocksize == 0:
        return BnB4Linear(packed, state), dequantize_4bit(packed, state)
    absmax = state.absmax
    if state.nested:
        absmax = dequantize_blockwise(state.absmax, state.state2) + state.offset
    reference = _dequantize_4bit_compute(
        packed.reshape(-1), absmax.float(), state.code, blocksize, (out_f, in_f), dtype
    )
    return BnB4Linear(packed, state), reference


def fp8_layer(out_f, in_f, block, scale_dtype, seed, subnormals=False):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(out_f, in_f, generator=gen) * 0.05
    if subnormals:  # one row spanning e4m3's subnormal and smallest normal codes
        w[0] = torch.linspace(-1, 1, in_f) * 2.0**-6 * w.abs().max() / 448
    weight, scale = quantize_fp8_block(w, block, scale_dtype)
    rows = torch.arange(out_f) // block[0]
    cols = torch.arange(in_f) // block[1]
    reference = weight.to(torch.float32) * scale.to(torch.float32)[rows][:, cols]
    return FP8BlockLinear(weight, scale, block), reference


# (builder, kwargs, expected path): partial groups and tiles through odd N, rows not a multiple of
# six, FP8 blocks partial at both edges, bitsandbytes blocks that straddle rows (K % blocksize)
CASES = {
    "w4_g32_sym": (w4a16_layer, dict(out_f=37, in_f=96, group=32, symmetric=True, scale_dtype=torch.float32)),
    "w4_g64_asym": (w4a16_layer, dict(out_f=50, in_f=192, group=64, symmetric=False, scale_dtype=torch.float32)),
    "w4_g32_asym_bf16": (w4a16_layer, dict(out_f=19, in_f=128, group=32, symmetric=False, scale_dtype=torch.bfloat16)),
    "w4_g96_sym_f16": (w4a16_layer, dict(out_f=24, in_f=192, group=96, symmetric=True, scale_dtype=torch.float16)),
    "nf4_dq": (nibble_layer, dict(out_f=33, in_f=96, blocksize=64, quant_type="nf4", double_quant=True, dtype=torch.float32)),
    "nf4_bf16": (nibble_layer, dict(out_f=20, in_f=256, blocksize=128, quant_type="nf4", double_quant=False, dtype=torch.bfloat16)),
    "fp4_dq_f16": (nibble_layer, dict(out_f=15, in_f=160, blocksize=64, quant_type="fp4", double_quant=True, dtype=torch.float16)),
    "fp8_b128_bf16": (fp8_layer, dict(out_f=150, in_f=192, block=(128, 128), scale_dtype=torch.bfloat16, subnormals=True)),
    "fp8_b32x48_f16": (fp8_layer, dict(out_f=41, in_f=96, block=(32, 48), scale_dtype=torch.float16)),
    "fp8_b16_f32": (fp8_layer, dict(out_f=17, in_f=64, block=(16, 16), scale_dtype=torch.float32)),
}  # fmt: skip
PATHS = {
    "w4": "w4a16_simd(fp32)",
    "nf4": "nibble_table_simd(fp32)",
    "fp4": "nibble_table_simd(fp32)",
}
PATHS["fp8"] = "fp8_simd(fp32)"


def build(case: str, seed: int = 0):
    make, kwargs = CASES[case]
    layer, reference = make(**kwargs, seed=seed)
    assert layer.configure("fused", torch.float32) is None
    assert layer.compute_path == PATHS[case.split("_")[0]], layer.compute_path
    return layer, reference


@pytest.fixture
def no_handover(monkeypatch):
    """The kernels compute every row count (no hand-over to dequantise + F.linear)."""
    monkeypatch.setattr(cpu_kernels, "SIMD_MAX_ROWS", dict.fromkeys(PATHS.values(), 10**9))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", list(CASES))
def test_each_decoded_weight_is_the_librarys_dequantised_value(case, dtype, no_handover):
    layer, reference = build(case)
    identity = torch.eye(layer.in_features, dtype=dtype)
    with torch.no_grad():
        got = layer(identity)
    want = reference.to(
        dtype
    ).T  # the exact path's weight: the library's, in the activations' dtype
    assert got.dtype == dtype
    assert torch.equal(got, want), (got.float() - want.float()).abs().max()


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("case", list(CASES))
def test_the_product_is_within_fp32_summation_of_the_librarys_weight(case, rows, no_handover):
    layer, reference = build(case, seed=rows)
    gen = torch.Generator().manual_seed(100 + rows)
    x = torch.randn(rows, layer.in_features, generator=gen)
    with torch.no_grad():
        got = layer(x).double()
    w = reference.double()
    ref = x.double() @ w.T
    bound = gamma(layer.in_features // 32 + 5) * (x.double().abs() @ w.abs().T)
    assert bool(((got - ref).abs() <= bound).all()), ((got - ref).abs() / bound).max().item()


@pytest.mark.parametrize("case", ["w4_g64_asym", "nf4_bf16", "fp8_b128_bf16"])
def test_bf16_activations_round_only_the_output(case, no_handover):
    layer, reference = build(case, seed=3)
    x = torch.randn(12, layer.in_features, generator=torch.Generator().manual_seed(3))
    x = x.bfloat16()
    with torch.no_grad():
        got = layer(x)
    assert got.dtype == torch.bfloat16
    w = reference.to(torch.bfloat16).double()
    ref = x.double() @ w.T
    e = gamma(layer.in_features // 32 + 5) * (x.double().abs() @ w.abs().T)
    bound = e + UB * (ref.abs() + e)
    assert bool(((got.double() - ref).abs() <= bound).all())


@pytest.mark.parametrize("case", ["w4_g32_sym", "nf4_dq", "fp8_b128_bf16"])
def test_a_row_computes_the_same_alone_or_in_any_batch(case, no_handover):
    layer, _ = build(case)
    x = torch.randn(13, layer.in_features, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        alone = torch.cat([layer(x[i : i + 1]) for i in range(13)])
        for rows in (2, 5, 12, 13):
            assert torch.equal(layer(x[:rows]), alone[:rows]), rows


def test_a_prefill_runs_the_kernel_in_tiles_not_a_path_chosen_by_rows():
    """Beyond SIMD_MAX_ROWS rows the kernel hands a prefill over to the exact path, a path chosen
    by M: a row would then get other bits in a long prefill than in a decode. In the engine's CPU
    forward the layer feeds its kernel 16-row tiles (engine/invariant/linears.py `adopt`), so
    every row is the kernel's, alone or among many."""
    layer, _ = build("w4_g64_asym")
    x = torch.randn(cpu_kernels.SIMD_MAX_ROWS[layer.compute_path] + 7, layer.in_features)
    with torch.no_grad():  # outside the engine: the rows decide the path
        assert torch.equal(layer(x), layer.exact_forward(x))
    adopt(layer)
    seen = []
    run = layer.fused.run
    layer.fused = dataclasses.replace(layer.fused, run=lambda t: seen.append(len(t)) or run(t))
    with torch.no_grad(), invariant_forward():
        alone = torch.cat([layer(x[i : i + 1]) for i in range(x.shape[0])])
        assert seen == [16] * x.shape[0]  # one row alone: one exact tile
        seen.clear()
        assert torch.equal(layer(x), alone)
        assert seen == [16] * -(-x.shape[0] // 16)  # never more rows than a tile
        assert not torch.equal(layer(x), layer.exact_forward(x))


def test_bitsandbytes_cpu_dequantisation_depends_on_the_cpu():
    """Why the exact path and the references read such layers with bitsandbytes' pure-torch code:
    its CPU C kernel reads them right only off its AVX-512 path. Where the library reports
    AVX-512 (its own `has_avx512f_cpu`), it restarts the blocks at each row, far from the
    weights it quantised (seen on an Intel Xeon with AVX-512); elsewhere (an AMD EPYC, Zen 3,
    AVX2) it gives the reference exactly. A reading that changed with the CPU would make the
    records do so; the pure-torch code reads the same everywhere."""
    from bitsandbytes.functional import dequantize_4bit, lib

    layer, reference = build("nf4_dq")  # 96 inputs, blocks of 64
    source = torch.randn(33, 96, generator=torch.Generator().manual_seed(0)) * 0.05  # its weight
    got = dequantize_4bit(layer.weight, layer.quant_state())
    assert torch.equal(layer.dequantize(), reference)
    if lib.has_avx512f_cpu():
        quantisation_error = (reference - source).abs().max()
        assert (got - source).abs().max() > 3 * quantisation_error
    else:
        assert torch.equal(got, reference)


VARIANT_CASES = ("nf4_bf16", "w4_g64_asym", "fp8_b128_bf16")
VARIANT = r"""
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
from test_simd_kernels import VARIANT_CASES, variant_outputs
from nudgeability.models.quant import cpu_kernels, simd
cpu_kernels.SIMD_MAX_ROWS = dict.fromkeys(cpu_kernels.SIMD_MAX_ROWS, 10**9)
print(json.dumps({"features": sorted(simd.cpu_features()), **variant_outputs()}))
"""


def variant_outputs() -> dict[str, list]:
    x = torch.randn(7, 256, generator=torch.Generator().manual_seed(5))
    out = {}
    for case in VARIANT_CASES:
        layer, _ = build(case)
        with torch.no_grad():
            out[case] = layer(x[:, : layer.in_features]).tolist()
    return out


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86 targets")
def test_the_avx2_and_portable_lookups_equal_this_cpus(tmp_path, no_handover):
    """Compiled for Haswell (AVX2: two 8-entry vpermps) and Ivy Bridge (no AVX2 nor FMA: the
    lane-by-lane lookup and a software fma), in fresh processes with their own numba cache."""
    host = variant_outputs()
    for name, features in (
        ("haswell", "+avx,+avx2,+fma,+f16c,+sse4.2,+popcnt"),
        ("ivybridge", "+avx,+f16c,+sse4.2,+popcnt"),
    ):
        env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / name)}
        env.update(NUMBA_CPU_NAME=name, NUMBA_CPU_FEATURES=features)
        run = subprocess.run(
            [sys.executable, "-c", VARIANT, os.path.dirname(__file__)],
            env=env,
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        result = json.loads(run.stdout.strip().splitlines()[-1])
        assert "avx512f" not in result["features"]
        assert ("avx2" in result["features"]) == (name == "haswell")
        for case in VARIANT_CASES:
            assert result[case] == host[case], (name, case)
