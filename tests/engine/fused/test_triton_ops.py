"""The fused layer kernels (engine/fused/triton_ops.py) under TRITON_INTERPRET=1 on CPU tensors.

Each kernel is launched through its wrapper, so it runs with the block sizes a GPU launch of the
same shape gets: the real widths of the supported models (hidden 2560, 4096, 5120; intermediate
9728; head_dim 128 and 256; partial rotary), odd row counts, in fp32 and fp16 (the interpreter's
bf16 is wrong). The references are float64 and written here from each family's definition in
transformers' modeling code, never from the code under test.

The tolerances, as bounds on |kernel - reference| (u = unit roundoff: 2^-24 fp32, 2^-11 fp16):

- a sum of N squares in fp32 is within (N - 1) u32 relative of the true sum (all terms are
  positive), and the reciprocal square root halves that, so the normed row is within
  (N/2 + 4) u32 relative (+4 for the rsqrt, the division by N, the products); each rounding to
  the dtype the definition makes (the normed row, the weighted output) adds u_dtype;
- an exp of argument z is within (1 + |z|) u32 relative (the rounding of z carries a |z| u32
  relative change through exp), then a division and a product, so act(gate) * up is within
  2 u_dtype + (8 + |z|) u32 relative;
- a rotary pair x1 c - x2 s is a sum of two products that may cancel: its error is bounded by
  the error of each term times the term's size, (3 u_dtype + e_norm)(|x1 c| + |x2 s|), with
  e_norm the normed row's relative error (above);
- fp16 outputs below 2^-14 are subnormal, so every bound gets an absolute 2^-24 as well (and
  act(gate), rounded before its product with up, carries its subnormal step times |up|).
"""

from __future__ import annotations

import os

import pytest
import torch

# tests/conftest.py sets TRITON_INTERPRET=1 before triton is first imported (it is read then)
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 set before triton is imported", allow_module_level=True)
pytest.importorskip("triton")

from nudgeability.engine.fused import triton_ops as ops  # noqa: E402

UNIT = {torch.float32: 2.0**-24, torch.float16: 2.0**-11}
U32 = UNIT[torch.float32]
TINY = 2.0**-24  # fp16's smallest subnormal step
DTYPES = [torch.float32, torch.float16]


def _inputs(shape, dtype, seed, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


def _check(out, ref, rel, absolute=TINY):
    err = (out.double() - ref).abs()
    bound = rel * ref.abs() + absolute
    assert bool((err <= bound).all()), f"worst excess {(err - bound).max().item():.3g}"


def _normed(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dim, in float64."""
    x = x.double()
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _norm_error(width: int) -> float:
    return (width / 2 + 4) * U32


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width", [(3, 2560), (1, 4096), (5, 5120), (7, 64), (2, 3)])
def test_rms_norm_scales_after_the_cast_as_qwen3_defines_it(dtype, rows, width):
    x = _inputs((rows, width), dtype, width + rows)
    weight = _inputs((width,), dtype, 7, 0.5) + 1
    out = ops.rms_norm(x, weight, 1e-6)
    ref = weight.double() * _normed(x, 1e-6)  # Qwen3RMSNorm: weight * (x / rms).to(dtype)
    assert out.dtype == dtype and out.shape == x.shape
    _check(out, ref, _norm_error(width) + 2 * UNIT[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width", [(3, 2560), (5, 5120), (9, 96)])
def test_rms_norm_with_residual_returns_the_new_residual_and_its_norm(dtype, rows, width):
    x = _inputs((rows, width), dtype, width)
    residual = _inputs((rows, width), dtype, width + 1, 4.0)
    weight = _inputs((width,), dtype, 3, 0.5) + 1
    out, new_residual = ops.rms_norm(x, weight, 1e-6, residual=residual)
    total = x.double() + residual.double()
    _check(new_residual, total, UNIT[dtype] if dtype != torch.float32 else U32)
    # the layer stores the sum in its dtype (`residual + hidden_states`) and normalises that
    ref = weight.double() * _normed(new_residual, 1e-6)
    _check(out, ref, _norm_error(width) + 2 * UNIT[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_scale", [True, False])
def test_rms_norm_scales_before_the_cast_as_gemma4_defines_it(dtype, with_scale):
    rows, width = 3, 2560  # Gemma 4 E4B's hidden size
    x = _inputs((rows, width), dtype, 11, 3.0)
    weight = _inputs((width,), dtype, 12, 0.5) if with_scale else None
    out = ops.rms_norm(x, weight, 1e-6, ops.SCALE_THEN_CAST)
    # Gemma4RMSNorm: (x * mean(x^2 + eps)^-1/2 * weight) in fp32, one cast (no 1 + weight)
    ref = _normed(x, 1e-6) * (weight.double() if with_scale else 1.0)
    _check(out, ref, _norm_error(width) + UNIT[dtype])


def test_rms_norm_output_follows_the_weight_dtype_as_torch_promotes_it():
    x = _inputs((2, 64), torch.float16, 1)
    weight = torch.ones(64)
    out = ops.rms_norm(x, weight, 1e-6)
    assert out.dtype == torch.float32  # fp32 weight * fp16 normed row, as in HF
    _check(out, _normed(x, 1e-6), _norm_error(64) + UNIT[torch.float16])


def test_a_tokens_result_does_not_depend_on_the_other_tokens():
    """Each kernel cuts a row's work by its width alone: a token alone and among 32 others gets
    the same bits (the batch-invariance property a row-count threshold would break)."""
    x = _inputs((33, 4096), torch.float32, 5)
    weight = _inputs((4096,), torch.float32, 6) + 1
    alone = ops.rms_norm(x[17:18], weight, 1e-6)
    assert torch.equal(ops.rms_norm(x, weight, 1e-6)[17:18], alone)
    gate, up = _inputs((33, 3000), torch.float32, 7), _inputs((33, 3000), torch.float32, 8)
    assert torch.equal(ops.act_mul(gate, up)[17:18], ops.act_mul(gate[17:18], up[17:18]))
    q = _inputs((33, 2, 128), torch.float32, 9)
    cos, sin = _angles(33, 128, torch.float32, 10)
    together = ops.norm_rope(q, cos, sin, weight[:128], 1e-6)[17:18]
    assert torch.equal(
        together, ops.norm_rope(q[17:18], cos[17:18], sin[17:18], weight[:128], 1e-6)
    )


def test_norm_blocks_cover_the_row_in_one_program():
    assert ops.norm_block(2560) == (4096, 8)
    assert ops.norm_block(4096) == (4096, 8)
    assert ops.norm_block(5120) == (8192, 16)
    assert ops.norm_block(128) == (128, 4)


def _act_reference(gate: torch.Tensor, act: int) -> tuple[torch.Tensor, torch.Tensor]:
    """act(gate) in float64 from its definition, and the exp argument's size."""
    g = gate.double()
    if act == ops.SILU:
        return g / (1 + torch.exp(-g)), g.abs()
    y = 0.7978845608028654 * (g + 0.044715 * g**3)
    return 0.5 * g * (1 + torch.tanh(y)), 2 * y.abs()


# exp(-g) overflows to inf for very negative g in fp32: act(g) = g / inf = -0, as it should be
@pytest.mark.filterwarnings("ignore:overflow encountered in exp")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", [ops.SILU, ops.GELU_TANH])
@pytest.mark.parametrize("rows,width", [(3, 9728), (1, 1000), (5, 64)])
def test_act_mul_against_the_definition(dtype, act, rows, width):
    gate = _inputs((rows, width), dtype, rows * width, 3.0)
    up = _inputs((rows, width), dtype, rows + width)
    out = ops.act_mul(gate, up, act)
    a, z = _act_reference(gate, act)
    assert out.dtype == dtype
    _check(out, a * up.double(), 2 * UNIT[dtype] + (8 + z) * U32, TINY * (1 + up.double().abs()))


def test_act_mul_reads_gate_and_up_as_halves_of_one_projection():
    fused = _inputs((3, 2, 2 * 96), torch.float32, 4, 3.0)  # GLM-4's gate_up_proj output
    gate, up = fused.chunk(2, dim=-1)
    out = ops.act_mul(gate, up)
    a, z = _act_reference(gate, ops.SILU)
    assert out.shape == gate.shape
    _check(out, a * up.double(), 2 * U32 + (8 + z) * U32)


def _rope_reference(x, cos, sin, interleaved):
    """HF's apply_rotary_pos_emb on x [T, H, D] with cos, sin [T, rot], in float64: rotate_half
    (Qwen3, Llama) or GLM-4's interleaved pairs, the dims past rot passed through. Returns the
    result and |x1 c| + |x2 s| per element, the size of what each rotary pair adds."""
    x, cos, sin = x.double(), cos.double()[:, None, :], sin.double()[:, None, :]
    rot = cos.shape[-1]
    xr, rest = x[..., :rot], x[..., rot:]
    if interleaved:
        cos = cos[..., : rot // 2].repeat_interleave(2, dim=-1)
        sin = sin[..., : rot // 2].repeat_interleave(2, dim=-1)
        turned = torch.stack((-xr[..., 1::2], xr[..., 0::2]), dim=-1).flatten(-2)
    else:
        turned = torch.cat((-xr[..., rot // 2 :], xr[..., : rot // 2]), dim=-1)
    out = torch.cat((xr * cos + turned * sin, rest), dim=-1)
    size = torch.cat(((xr * cos).abs() + (turned * sin).abs(), rest.abs()), dim=-1)
    return out, size


def _angles(tokens, rot, dtype, seed):
    """cos and sin [tokens, rot] laid out as HF's rotary modules return them (halves repeated)."""
    gen = torch.Generator().manual_seed(seed)
    positions = torch.randint(0, 40000, (tokens, 1), generator=gen).double()
    freqs = positions / 1e6 ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens,heads,d", [(3, 4, 128), (1, 2, 256), (5, 3, 64)])
def test_head_norm_then_rope_as_qwen3_attention_computes_them(dtype, tokens, heads, d):
    x = _inputs((tokens, heads, d), dtype, tokens * d, 2.0)
    weight = _inputs((d,), dtype, d, 0.5) + 1
    cos, sin = _angles(tokens, d, dtype, tokens)
    out = ops.norm_rope(x, cos, sin, weight, 1e-6)
    normed = weight.double() * _normed(x, 1e-6)
    ref, size = _rope_reference(normed, cos, sin, interleaved=False)
    err_norm = _norm_error(d) + 2 * UNIT[dtype]
    _check(out, ref, 0.0, (3 * UNIT[dtype] + err_norm) * size + TINY)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("tokens,heads,d,rot", [(3, 2, 128, 64), (7, 3, 128, 128), (2, 2, 96, 48)])
def test_rope_alone_full_and_partial(dtype, interleaved, tokens, heads, d, rot):
    x = _inputs((1, tokens, heads, d), dtype, d + rot + tokens, 2.0)
    cos, sin = _angles(tokens, rot, dtype, d)
    out = ops.norm_rope(x, cos[None], sin[None], interleaved=interleaved)
    ref, size = _rope_reference(x[0], cos, sin, interleaved)
    assert out.shape == x.shape
    _check(out[0], ref, 0.0, 3 * UNIT[dtype] * size + TINY)


def test_rope_refuses_a_rotary_width_wider_than_the_head():
    x = torch.zeros(2, 1, 64)
    cos = torch.zeros(2, 128)
    with pytest.raises(ValueError, match="rotary width"):
        ops.norm_rope(x, cos, cos)
