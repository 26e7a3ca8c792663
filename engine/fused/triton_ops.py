"""Triton kernels for a decoder layer's small ops, and the wrappers that launch them.

Each op is one launch where the HF module makes several (a cast, a square, a mean, an rsqrt, two
products and a cast for an RMSNorm; a dozen for a norm followed by the rotary embedding):

- `rms_norm`: one program per row, the whole row in registers (BLOCK = the next power of two of
  the width, masked), optionally adding a residual first and storing the sum (the layer's new
  residual). Three weight rules, as the families define them: `CAST_THEN_SCALE` (Qwen3, GLM-4,
  Llama: `weight * (x / rms).to(dtype)`), `SCALE_THEN_CAST` (Gemma 4:
  `(x / rms * weight).to(dtype)`, all in fp32) and `NO_WEIGHT` (Gemma 4's value norm).
- `act_mul`: act(gate) * up, act SiLU or GELU's tanh form, over [rows, I] in column tiles.
- `norm_rope`: per (token, head), the head's RMSNorm (optional) and then the rotary embedding, in
  HF's `rotate_half` layout (pairs j and j + rot/2) or GLM's interleaved one (pairs 2j and 2j + 1),
  over the first `rot` dims, the rest passed through (partial rotary).

Every intermediate that the HF module rounds to the model's dtype is rounded here too (the sum of a
residual add, the normed row before Qwen3's weight, act(gate) before the product, each product of
the rotary), so the kernels differ from eager only in rounding: the order of the fp32 sums, the exp
and rsqrt, and on a GPU the compiler's fused multiply-adds. A row's reduction is cut by its width
alone, never by the row count, so a token's bits do not depend on the others in the launch.

The block sizes are fixed rules of the shapes (`norm_block`, `ACT_BLOCK`), no autotuning. Triton
is imported lazily, as models/quant/triton_kernels.py does; with `TRITON_INTERPRET=1` the same
kernels run on CPU tensors (tests/engine/fused/), in fp32 and fp16 (the interpreter's bf16 is
wrong).
"""

from __future__ import annotations

from functools import lru_cache

import torch

from nudgeability.models.quant.triton_kernels import available  # noqa: F401 (layers.py)

NO_WEIGHT, CAST_THEN_SCALE, SCALE_THEN_CAST = 0, 1, 2
SILU, GELU_TANH = 0, 1
ACT_BLOCK = 1024  # columns per act_mul program: intermediate sizes are thousands wide


@lru_cache(maxsize=1)
def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def rms_norm(
        x_ptr, r_ptr, w_ptr, out_ptr, res_ptr, N, stride_x, stride_r, stride_o, stride_res, eps,
        HAS_RESIDUAL: tl.constexpr, WEIGHT: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
        if HAS_RESIDUAL:
            r = tl.load(r_ptr + row * stride_r + cols, mask=mask, other=0.0)
            # the layer stores the sum in the model's dtype, and the norm reads that
            x = (x.to(tl.float32) + r.to(tl.float32)).to(x_ptr.dtype.element_ty)
            tl.store(res_ptr + row * stride_res + cols, x, mask=mask)
        xf = x.to(tl.float32)
        normed = xf * tl.rsqrt(tl.sum(xf * xf, axis=0) / N + eps)
        if WEIGHT == 1:  # CAST_THEN_SCALE
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            y = w * normed.to(x_ptr.dtype.element_ty).to(tl.float32)
        elif WEIGHT == 2:  # SCALE_THEN_CAST
            y = normed * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        else:
            y = normed
        tl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def act_mul(
        g_ptr, u_ptr, out_ptr, N, stride_g, stride_u, stride_o,
        ACT: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < N
        g = tl.load(g_ptr + row * stride_g + cols, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(u_ptr + row * stride_u + cols, mask=mask, other=0.0)
        if ACT == 0:  # SiLU: g * sigmoid(g)
            a = g / (1.0 + tl.exp(-g))
        else:  # GELU's tanh form: 0.5 g (1 + tanh(y)) = g sigmoid(2y), without 1 + tanh's
            # cancellation where tanh(y) nears -1; 0.79788... is sqrt(2 / pi), as in torch's
            y = 0.7978845608028654 * (g + 0.044715 * g * g * g)
            a = g / (1.0 + tl.exp(-2.0 * y))
        a = a.to(g_ptr.dtype.element_ty).to(tl.float32)  # HF rounds act(gate) before the product
        tl.store(
            out_ptr + row * stride_o + cols,
            (a * u.to(tl.float32)).to(out_ptr.dtype.element_ty),
            mask=mask,
        )

    @triton.jit
    def norm_rope(
        x_ptr, w_ptr, cos_ptr, sin_ptr, out_ptr, stride_xt, stride_xh, stride_ct, stride_st,
        stride_ot, stride_oh, eps,
        NORM: tl.constexpr, INTERLEAVED: tl.constexpr, D: tl.constexpr, HALF: tl.constexpr,
        BLOCK_HALF: tl.constexpr, BLOCK_PASS: tl.constexpr,
    ):  # fmt: skip
        token = tl.program_id(0).to(tl.int64)
        head = tl.program_id(1).to(tl.int64)
        dt = x_ptr.dtype.element_ty
        j = tl.arange(0, BLOCK_HALF)
        jm = j < HALF
        if INTERLEAVED:  # GLM: pairs (2j, 2j + 1), both turned by angle j
            i1, i2, c2 = 2 * j, 2 * j + 1, j
        else:  # rotate_half: pairs (j, j + rot/2), the second half read from cos's second half
            i1, i2, c2 = j, j + HALF, j + HALF
        p = 2 * HALF + tl.arange(0, BLOCK_PASS)  # the dims past the rotary ones (partial rotary)
        pm = p < D
        x_at = x_ptr + token * stride_xt + head * stride_xh
        x1 = tl.load(x_at + i1, mask=jm, other=0.0).to(tl.float32)
        x2 = tl.load(x_at + i2, mask=jm, other=0.0).to(tl.float32)
        xp = tl.load(x_at + p, mask=pm, other=0.0).to(tl.float32)
        if NORM:  # the head's RMSNorm, Qwen3's rule: (x / rms) rounded, then times the weight
            total = tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0) + tl.sum(xp * xp, axis=0)
            scale = tl.rsqrt(total / D + eps)
            w1 = tl.load(w_ptr + i1, mask=jm, other=0.0).to(tl.float32)
            w2 = tl.load(w_ptr + i2, mask=jm, other=0.0).to(tl.float32)
            wp = tl.load(w_ptr + p, mask=pm, other=0.0).to(tl.float32)
            x1 = (w1 * (x1 * scale).to(dt).to(tl.float32)).to(dt).to(tl.float32)
            x2 = (w2 * (x2 * scale).to(dt).to(tl.float32)).to(dt).to(tl.float32)
            xp = wp * (xp * scale).to(dt).to(tl.float32)
        cos1 = tl.load(cos_ptr + token * stride_ct + j, mask=jm, other=0.0).to(tl.float32)
        sin1 = tl.load(sin_ptr + token * stride_st + j, mask=jm, other=0.0).to(tl.float32)
        cos2 = tl.load(cos_ptr + token * stride_ct + c2, mask=jm, other=0.0).to(tl.float32)
        sin2 = tl.load(sin_ptr + token * stride_st + c2, mask=jm, other=0.0).to(tl.float32)
        # x * cos + rotate_half(x) * sin, each product rounded to the dtype as HF's are
        y1 = (x1 * cos1).to(dt).to(tl.float32) + (-x2 * sin1).to(dt).to(tl.float32)
        y2 = (x2 * cos2).to(dt).to(tl.float32) + (x1 * sin2).to(dt).to(tl.float32)
        o_at = out_ptr + token * stride_ot + head * stride_oh
        tl.store(o_at + i1, y1.to(dt), mask=jm)
        tl.store(o_at + i2, y2.to(dt), mask=jm)
        tl.store(o_at + p, xp.to(dt), mask=pm)

    return triton, {"rms_norm": rms_norm, "act_mul": act_mul, "norm_rope": norm_rope}


def norm_block(width: int) -> tuple[int, int]:
    """(BLOCK, num_warps) for a norm over rows of `width`: the whole row in one program (a row's
    reduction then depends on its width alone), more warps as the row widens."""
    block = 1 << max(width - 1, 0).bit_length()
    return block, 4 if block <= 2048 else 8 if block <= 4096 else 16


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    rule: int = CAST_THEN_SCALE,
    residual: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of `x` over its last dim by `rule` (module docstring). With `residual`:
    (norm(x + residual), x + residual), the sum rounded to x's dtype. The output's dtype is the
    one the HF module returns: CAST_THEN_SCALE promotes with the weight's, the others keep x's."""
    triton, kernels = _kernels()
    shape, width = x.shape, x.shape[-1]
    rows = x.reshape(-1, width)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out_dtype = torch.promote_types(weight.dtype, x.dtype) if rule == CAST_THEN_SCALE else x.dtype
    out = torch.empty(rows.shape, dtype=out_dtype, device=x.device)
    if residual is not None:
        r = residual.reshape(-1, width)
        if r.stride(-1) != 1:
            r = r.contiguous()
        res_out = torch.empty_like(rows)
    else:
        r = res_out = rows  # not read: HAS_RESIDUAL is off
    block, warps = norm_block(width)
    if rows.shape[0]:
        kernels["rms_norm"][(rows.shape[0],)](
            rows, r, weight if weight is not None else rows, out, res_out, width,
            rows.stride(0), r.stride(0), out.stride(0), res_out.stride(0), eps,
            HAS_RESIDUAL=residual is not None, WEIGHT=rule if weight is not None else NO_WEIGHT,
            BLOCK=block, num_warps=warps,
        )  # fmt: skip
    if residual is None:
        return out.view(shape)
    return out.view(shape), res_out.view(shape)


def act_mul(gate: torch.Tensor, up: torch.Tensor, act: int = SILU) -> torch.Tensor:
    """act(gate) * up for `act` SILU or GELU_TANH, in gate's dtype; gate and up may be column
    slices of one tensor (GLM-4's fused gate_up projection)."""
    triton, kernels = _kernels()
    shape, width = gate.shape, gate.shape[-1]
    g, u = gate.reshape(-1, width), up.reshape(-1, width)
    if g.stride(-1) != 1 or u.stride(-1) != 1:
        g, u = g.contiguous(), u.contiguous()
    out = torch.empty(g.shape, dtype=gate.dtype, device=gate.device)
    if g.shape[0]:
        grid = (g.shape[0], triton.cdiv(width, ACT_BLOCK))
        kernels["act_mul"][grid](
            g, u, out, width, g.stride(0), u.stride(0), out.stride(0),
            ACT=act, BLOCK=ACT_BLOCK, num_warps=4,
        )  # fmt: skip
    return out.view(shape)


def norm_rope(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 0.0,
    interleaved: bool = False,
) -> torch.Tensor:
    """The rotary embedding of x [..., tokens, heads, D] by cos and sin [..., tokens, rot]
    (rot <= D, as HF's rotary modules return them, broadcast over x's leading dims), after the
    head's RMSNorm by `weight` (Qwen3's rule) when one is given. `interleaved`: GLM-4's pairs
    (2j, 2j + 1), turned by cos[..., j]."""
    triton, kernels = _kernels()
    *lead, heads, d = x.shape
    rot = cos.shape[-1]
    if rot % 2 or rot > d:
        raise ValueError(f"a rotary width of {rot} does not fit heads of {d}")
    if weight is not None and weight.dtype != x.dtype:
        raise ValueError("the fused head norm keeps the HF dtype rule only for weight == x dtype")
    rows = x.reshape(-1, heads, d)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    # HF's angles may be one batch row for many (position_ids [1, L]): expanded, copied then
    c, s = (t.expand(*lead, rot).reshape(-1, rot) for t in (cos, sin))
    if c.stride(-1) != 1 or s.stride(-1) != 1:
        c, s = c.contiguous(), s.contiguous()
    out = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    half = rot // 2
    if rows.shape[0]:
        kernels["norm_rope"][(rows.shape[0], heads)](
            rows, weight if weight is not None else rows, c, s, out,
            rows.stride(0), rows.stride(1), c.stride(0), s.stride(0), out.stride(0),
            out.stride(1), eps,
            NORM=weight is not None, INTERLEAVED=interleaved, D=d, HALF=half,
            BLOCK_HALF=max(1 << max(half - 1, 0).bit_length(), 1),
            BLOCK_PASS=max(1 << max(d - rot - 1, 0).bit_length(), 1), num_warps=4,
        )  # fmt: skip
    return out.view(*lead, heads, d)
