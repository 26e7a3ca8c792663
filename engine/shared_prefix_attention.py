"""Shared-prefix ("cascade") attention over a `ForkCache`.

Registered with transformers' `AttentionInterface` as `nudge_fork`. In the arm phase each query
attends to two key sets, computed separately and merged exactly through their log-sum-exps:

1. **the group's prefix**, read once for all arms of the group: the arms are folded into the query
   rows, `[G, kv, A*g, D]` against `prefix_k[G, kv, T, D]`, so the prefix is never broadcast or
   copied per arm;
2. **the arm's own suffix**: in a decode step, each row against its own static slots; in the
   packed suffix prefill, the call's tokens against each other within an arm.

Each part is one attention call that also returns its log-sum-exp (on CPU the fused flash kernel
behind SDPA; elsewhere plain matmuls with fp32 softmax statistics), with an additive bias that the
step builds once (`attention_layout`). Softmax over both key sets is then a convex mix of the two
outputs, weighted by `sigmoid(lse_prefix - lse_suffix)`. The prefix phase is plain causal
self-attention over the padded prefix batch, through SDPA.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from nudgeability.engine.attention_layout import ArmStep, prefix_bias, suffix_bias
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
    """[B, H, L, D] -> [B, L, H, D]: each query row against its group's prefix and its own suffix,
    merged by log-sum-exp. Works in the row view `[n, kv, g, D]` (one query per row: a decode
    step's scheduled rows, or the packed prefill's tokens)."""
    step, layer = handle.step, handle.layer
    b, h, length, d = q.shape
    kv = layer.suffix_k.shape[1]
    g = h // kv
    if step.packed:  # [1, H, T, D] = [1, kv, g*T, D]; rows are the T tokens
        o_s, lse_s = _attend(
            q.reshape(1, kv, g * length, d),
            handle.keys,
            handle.values,
            suffix_bias(step, window, g, q.dtype),
            scaling,
        )
        o_s = o_s.view(kv, g, length, d).permute(2, 0, 1, 3)  # row view [T, kv, g, D]
        lse_s = lse_s.view(kv, g, length).permute(2, 0, 1)
        rows = q[0].view(kv, g, length, d).permute(2, 0, 1, 3)
    else:  # [n, H, 1, D] = [n, kv, g, D]
        rows = q.view(b, kv, g, d)
        ks, vs = layer.suffix_k, layer.suffix_v
        if step.hw < ks.shape[2]:
            ks, vs = ks[:, :, : step.hw], vs[:, :, : step.hw]
        if not step.fold.rows_are_all:
            ks, vs = ks.index_select(0, step.fold.rows), vs.index_select(0, step.fold.rows)
        o_s, lse_s = _attend(rows, ks, vs, suffix_bias(step, window, g, q.dtype), scaling)

    if layer.prefix_k is not None and layer.prefix_k.shape[2] > 0:
        o_p, lse_p = _prefix_part(rows, layer, step, scaling, window)
        # softmax over both key sets = a convex mix of the two parts, weighted by their mass
        weight = torch.sigmoid(lse_p - lse_s).unsqueeze(-1)
        if o_s.dtype != torch.float32:  # mix in fp32, round once
            out = torch.lerp(o_s.float(), o_p.float(), weight).to(q.dtype)
        else:
            out = torch.lerp(o_s, o_p, weight)
    else:
        out = o_s
    # row view [n, kv, g, D] -> [B, L, H, D]
    return out.reshape(b, length, h, d)


def _attend(q, k, v, bias, scaling: float):
    """Attention of q `[B, h, M, D]` over k/v `[B, h, S, D]` with an additive `bias` (None: every
    key visible), returning the
    normalised output (q's dtype) and the fp32 log-sum-exp of the scores `[B, h, M]`."""
    if q.device.type == "cpu":
        # One fused op (the CPU flash kernel behind SDPA), which also returns the log-sum-exp.
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, False, attn_mask=bias, scale=scaling
        )
    return _attend_explicit(q, k, v, bias, scaling)


def _attend_explicit(q, k, v, bias, scaling: float):
    """The same as `_attend` with plain matmuls: fp32 scores in chunks of query rows, so that a
    long prefix's scores stay within PREFIX_SCORE_ELEMENTS (used off CPU)."""
    b, h, m, d = q.shape
    out = torch.empty(b, h, m, d, dtype=q.dtype, device=q.device)
    lse = torch.empty(b, h, m, dtype=torch.float32, device=q.device)
    chunk = max(1, PREFIX_SCORE_ELEMENTS // max(1, b * h * k.shape[2]))
    for r0 in range(0, m, chunk):
        r1 = min(m, r0 + chunk)
        s = torch.matmul(q[:, :, r0:r1], k.transpose(-1, -2)).float().mul_(scaling)
        if bias is not None:
            s.add_(bias if bias.shape[2] == 1 else bias[:, :, r0:r1])
        mx = s.amax(dim=-1, keepdim=True)
        e = s.sub_(mx).exp_()
        total = e.sum(dim=-1, keepdim=True)
        out[:, :, r0:r1] = (torch.matmul(e.to(v.dtype), v).float() / total).to(q.dtype)
        lse[:, :, r0:r1] = (mx + total.log()).squeeze(-1)
    return out, lse


def _prefix_part(rows, layer, step: ArmStep, scaling, window):
    """Prefix attention of the query rows `[n, kv, g, D]`, as (output, log-sum-exp) in the row view.

    The rows are folded group by group into `[groups, kv, arms*g, D]`, so that each group's prefix
    `[groups, kv, T, D]` is read once for all its arms (zero rows stand for absent arms)."""
    n, kv, g, d = rows.shape
    fold = step.fold
    groups, arms = fold.group_hi - fold.group_lo, fold.arms_per_group
    pk, pv = layer.prefix_k, layer.prefix_v
    if groups < pk.shape[0]:  # a view: the prefix is never copied
        pk, pv = pk[fold.group_lo : fold.group_hi], pv[fold.group_lo : fold.group_hi]
    if fold.is_identity:
        folded = rows
    else:
        folded = rows.new_zeros(groups * arms, kv, g, d)
        folded[fold.index] = rows
    folded = folded.reshape(groups, arms, kv, g, d).transpose(1, 2).reshape(groups, kv, arms * g, d)
    bias = prefix_bias(step, layer.prefix_start, window, g, pk.shape[2], rows.dtype)
    o, lse = _attend(folded, pk, pv, bias, scaling)
    o = o.view(groups, kv, arms, g, d).transpose(1, 2).reshape(groups * arms, kv, g, d)
    lse = lse.view(groups, kv, arms, g).transpose(1, 2).reshape(groups * arms, kv, g)
    if not fold.is_identity:
        o, lse = o[fold.index], lse[fold.index]
    return o, lse


AttentionInterface.register(NAME, shared_prefix_attention)
