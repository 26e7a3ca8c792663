"""Shared-prefix ("cascade") attention over a `ForkCache`.

Registered with transformers' `AttentionInterface` as `nudge_fork`. In the arm phase each query
attends to two key sets, computed separately and merged exactly through their log-sum-exp:

1. **the group's prefix**, read once for all arms of the group: the arms are folded into the query
   rows, `[G, kv, A*g*L, D] @ prefix_k[G, kv, D, T]`, so the prefix is never broadcast or copied
   per arm;
2. **the arm's own suffix slots**, a batched matmul with a causal-by-slot mask.

Matmuls run in the storage dtype; softmax statistics in fp32. The prefix phase is plain causal
self-attention over the padded prefix batch, through SDPA.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from nudgeability.engine.attention_layout import ArmStep, prefix_hidden, suffix_hidden
from nudgeability.engine.fork_cache import ArmKV, PrefixKV

NAME = "nudge_fork"
PREFILL_WINDOW_BLOCK = 1024  # queries per SDPA call on sliding-window layers in prefill
PREFIX_SCORE_ELEMENTS = 1 << 22  # fp32 prefix scores held at once by the arms (16 MiB)


def shared_prefix_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs
):
    """HF attention-interface entry point; `key` is the handle returned by `ForkCache.update`."""
    handle = key
    if not isinstance(handle, (PrefixKV, ArmKV)):
        raise RuntimeError("nudge_fork attention needs a ForkCache; use nudgeability.engine.Engine")
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    window = kwargs.get("sliding_window", handle.window)
    if window is None:
        window = handle.window
    if isinstance(handle, ArmKV):
        return _arm_attention(query, handle, scaling, window), None
    out = _causal_self_attention(
        query,
        handle.keys,
        handle.values,
        scaling,
        window,
        handle.step.chunk_start,
        handle.key_start,
    )
    return out, None


def _causal_self_attention(
    q, k, v, scaling: float, window: int | None, q0: int = 0, k0: int = 0
) -> torch.Tensor:
    """Causal (optionally windowed) attention of a right-padded chunk: [B,H,L,D] -> [B,L,H,D].

    The queries sit at positions [q0, q0+L), the keys at [k0, q0+L). Right padding needs no mask:
    a real token only sees earlier slots, which are all real. SDPA's fused kernels do the work
    (flash on CPU and CUDA); when the chunk does not start the prefix or a window applies, a
    boolean mask is built per block of queries, so that it stays small for long prefixes.
    """
    length = q.shape[2]
    if q0 == 0 and k0 == 0 and (window is None or window >= length):
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=scaling, enable_gqa=True
        )
        return out.transpose(1, 2)
    out = torch.empty_like(q)
    block = max(window or 0, PREFILL_WINDOW_BLOCK)
    for b0 in range(0, length, block):
        b1 = min(b0 + block, length)
        first = (
            k0 if window is None else max(k0, q0 + b0 - window + 1)
        )  # the first key position needed
        qpos = torch.arange(q0 + b0, q0 + b1, device=q.device)[:, None]
        kpos = torch.arange(first, q0 + b1, device=q.device)[None, :]
        visible = kpos <= qpos
        if window is not None:
            visible &= (qpos - kpos) < window
        out[:, :, b0:b1] = F.scaled_dot_product_attention(
            q[:, :, b0:b1],
            k[:, :, first - k0 : q0 + b1 - k0],
            v[:, :, first - k0 : q0 + b1 - k0],
            attn_mask=visible,
            scale=scaling,
            enable_gqa=True,
        )
    return out.transpose(1, 2)


def _arm_attention(q, handle: ArmKV, scaling: float, window: int | None) -> torch.Tensor:
    ctx, layer = handle.step, handle.layer
    n, h, length, d = q.shape
    kv = layer.suffix_k.shape[1]
    g = h // kv
    gl = g * length
    q = q.reshape(n, kv, gl, d)

    # Suffix part: each arm against its own slots [0, hw).
    if ctx.fold.rows_are_all:
        ks, vs = layer.suffix_k[:, :, : ctx.hw], layer.suffix_v[:, :, : ctx.hw]
    else:
        ks = layer.suffix_k[:, :, : ctx.hw].index_select(0, ctx.fold.rows)
        vs = layer.suffix_v[:, :, : ctx.hw].index_select(0, ctx.fold.rows)
    # Scores are updated in place: they are the largest transient of a step.
    s = torch.matmul(q, ks.transpose(-1, -2)).float().mul_(scaling)  # [n, kv, gl, hw]
    s = s.view(n, kv, g, length, ctx.hw).masked_fill_(suffix_hidden(ctx, window), float("-inf"))
    m_s = s.amax(dim=-1, keepdim=True)  # finite: every query sees its own slot
    e = s.sub_(m_s).exp_()
    l_s = e.sum(dim=-1, keepdim=True).view(n, kv, gl, 1)
    o_s = torch.matmul(e.to(vs.dtype).view(n, kv, gl, ctx.hw), vs).float()
    m_s = m_s.view(n, kv, gl, 1)

    if layer.prefix_k is not None and layer.prefix_k.shape[2] > 0:
        o_p, m_p, l_p = _prefix_part(q, layer, ctx, scaling, window, g, length)
        m = torch.maximum(m_s, m_p)
        a_s, a_p = torch.exp(m_s - m), torch.exp(m_p - m)
        out = (o_s * a_s + o_p * a_p) / (l_s * a_s + l_p * a_p)
    else:
        out = o_s / l_s
    return out.to(q.dtype).view(n, kv, g, length, d).reshape(n, h, length, d).transpose(1, 2)


def _prefix_part(q, layer, ctx: ArmStep, scaling, window, g: int, length: int):
    """Unnormalised prefix attention of the scheduled rows, as ([n,kv,gl,D], max [n,kv,gl,1], sum)."""
    n, kv, gl, d = q.shape
    fold = ctx.fold
    groups, arms = fold.group_hi - fold.group_lo, fold.arms_per_group
    pk = layer.prefix_k[fold.group_lo : fold.group_hi]  # a view: the prefix is never copied
    pv = layer.prefix_v[fold.group_lo : fold.group_hi]
    t = pk.shape[2]
    # Fold: [n, kv, gl, D] -> [groups, kv, arms*gl, D] (zero rows for absent arms).
    if fold.is_identity:
        folded = q.view(groups, arms, kv, gl, d)
    else:
        folded = q.new_zeros(groups * arms, kv, gl, d)
        folded[fold.index] = q
        folded = folded.view(groups, arms, kv, gl, d)
    folded = folded.transpose(1, 2).reshape(groups, kv, arms * gl, d)
    hidden = prefix_hidden(ctx, layer.prefix_start, window, g, length, t)
    rows = arms * gl
    o = torch.empty(groups, kv, rows, d, dtype=torch.float32, device=q.device)
    m = torch.empty(groups, kv, rows, 1, dtype=torch.float32, device=q.device)
    lse = torch.empty_like(m)
    # Rows in chunks, so that a long prefix's fp32 scores stay within PREFIX_SCORE_ELEMENTS.
    step = max(1, PREFIX_SCORE_ELEMENTS // max(1, groups * kv * t))
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        s = (
            torch.matmul(folded[:, :, r0:r1], pk.transpose(-1, -2)).float().mul_(scaling)
        )  # [groups, kv, r, T]
        s.masked_fill_(hidden if hidden.shape[2] == 1 else hidden[:, :, r0:r1], float("-inf"))
        mc = s.amax(dim=-1, keepdim=True)
        e = s.sub_(torch.where(torch.isfinite(mc), mc, torch.zeros_like(mc))).exp_()
        m[:, :, r0:r1], lse[:, :, r0:r1] = mc, e.sum(dim=-1, keepdim=True)
        o[:, :, r0:r1] = torch.matmul(e.to(pv.dtype), pv)

    def unfold(x):
        x = (
            x.view(groups, kv, arms, gl, x.shape[-1])
            .transpose(1, 2)
            .reshape(groups * arms, kv, gl, x.shape[-1])
        )
        return x if fold.is_identity else x[fold.index]

    return unfold(o), unfold(m), unfold(lse)


AttentionInterface.register(NAME, shared_prefix_attention)
