"""Shared-prefix ("cascade") attention over the `KVPool`, for every token of an engine step.

Registered with transformers' `AttentionInterface` as `nudge_fork`. A step's tokens come in three
kinds (`step_layout`):

- **prefix chunks** attend causally to their own run, read in place from the pool: on CUDA one
  flash call per chunk with the diagonal at the bottom right (`lse_kernels.causal_cuda`, with
  flash's own window on a sliding-window layer), elsewhere SDPA's fused kernel on fixed blocks of
  PREFILL_QUERY_BLOCK queries;
- **row tokens** attend to two key sets, computed separately and merged exactly through their
  log-sum-exps:
  1. their group's prefix segments, read in place once per group for all its row tokens: the
     tokens are folded into the query rows, `[1, kv, n*g, D]` against `[1, kv, P, D]`, so a
     prefix is never broadcast or copied per arm;
  2. their own row's slots up to their own, gathered from the row's blocks; one call for all
     rows feeding one token (decode), one for the rows feeding several (prefill).
  Softmax over both key sets is a convex mix of the two outputs, weighted by
  `sigmoid(lse_prefix - lse_suffix)` (a prefix of two segments, a run and a stem, is merged the
  same way first);
- **pad tokens** get zeros.

In batch-invariant mode on CUDA (engine/invariant/cuda/mode.py) prefix chunks and row tokens run
instead the paged kernel (engine/invariant/cuda/paged_attention.py): every key source in splits
of fixed size aligned to its start, merged in a fixed order, so that a token's bits depend on no
batch; the layout carries its tables (`StepLayout.paged`).

Each part is one call of a kernel that returns the log-sum-exp (`_attend`): the fused flash
kernel on CPU; on CUDA the kernel `lse_kernels.cuda_kernel` picks by SDPA's own constraints (the fused flash
kernel when no mask is needed and it takes the head size, the memory-efficient kernel otherwise,
every fallback recorded); elsewhere plain matmuls with fp32 softmax statistics
(`lse_kernels.attend_explicit`). Masks are additive biases built once per step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from nudgeability.engine.attention import cpu_attention, cpu_decode_rows
from nudgeability.engine.attention.graphed_decode import relative_difference
from nudgeability.engine.attention.lse_kernels import (
    attend_cuda,
    attend_explicit,
    causal_cuda,
    flash_takes_window,
)
from nudgeability.engine.attention.static_decode import StaticDecode, flex_decode_attention
from nudgeability.engine.invariant.cpu.attention import merge
from nudgeability.engine.kv.kv_cache import LayerKV
from nudgeability.engine.scheduling.step_layout import GroupSpan, StepLayout, SuffixPart
from nudgeability.util import fallbacks

NAME = "nudge_fork"
PREFILL_QUERY_BLOCK = 64  # queries per SDPA call in a prefix chunk


def shared_prefix_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs
):
    """HF attention-interface entry point; `key` is the handle returned by `PoolCache.update`."""
    handle = key
    if not isinstance(handle, LayerKV):
        raise RuntimeError("nudge_fork attention needs a PoolCache; use nudgeability.engine.Engine")
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    window = kwargs.get("sliding_window") or handle.window
    if isinstance(handle.layout, StaticDecode):  # a fixed-shape decode step (static_decode.py)
        if handle.layout.paged is not None:  # the paged kernel, as the eager rows run it
            from nudgeability.engine.invariant.cuda import paged_attention as paged

            return paged.static_decode_attention(query, handle, scaling, window), None
        return flex_decode_attention(query, handle, scaling, window), None
    return step_attention(query, handle, scaling, window), None


def fixed_shape_cpu(t: torch.Tensor) -> bool:
    """Whether this step's parts take the fixed-shape CPU calls (cpu_attention.py): on CPU. The
    tests of the CUDA branch's logic turn it off to run that branch with CPU stand-ins."""
    return t.device.type == "cpu"


def whole_chunk(t: torch.Tensor, window: int | None) -> bool:
    """Whether a prefix chunk runs as one causal flash call (`lse_kernels.causal_cuda`): on CUDA,
    and on a sliding-window layer where torch's flash op takes the window (`flash_takes_window`).
    The tests of the branch turn it on to run it with CPU stand-ins."""
    return t.device.type == "cuda" and (window is None or flash_takes_window())


# The windowed flash call goes through a private op whose window convention is read from flash's
# source (`lse_kernels.causal_cuda`), not from a documented contract, and the test suite runs it
# only with CPU stand-ins: a process checks its first windowed chunk once against the 64-query
# blocks, and keeps the blocks for good where the call fails or the two differ by more than
# rounding. One attention output in fp16/bf16 differs between kernels by a few units of the last
# place; a window ignored or misplaced moves it by O(1) (tests/engine/attention/test_prefill_chunk_cuda.py).
WINDOW_CHECK_BOUND = 2e-2
WINDOW_FLASH = "flash attention with a sliding window (prefill chunk)"
BLOCKS = "64-query SDPA blocks"
_window_flash: dict[str, bool] = {}  # "trusted": True once checked, False once refused


def _flash_chunk(qc, keys, values, scaling: float, window, c0: int, k0: int):
    """The chunk's one flash call (`lse_kernels.causal_cuda`), [1, H, L, D], or None where the
    blocks run instead: flash cannot take it, or a windowed call failed its check (above)."""
    if window is None:
        return causal_cuda(qc, keys, values, scaling)
    trusted = _window_flash.get("trusted")
    if trusted is False:
        return None
    try:
        whole = causal_cuda(qc, keys, values, scaling, window)
    except RuntimeError as exc:
        fallbacks.record(WINDOW_FLASH, BLOCKS, f"the call failed: {exc}")
        _window_flash["trusted"] = False
        return None
    if whole is None or trusted:
        return whole
    blocks = _causal_self_attention(qc, keys, values, scaling, window, c0, k0)
    difference = relative_difference(whole.transpose(1, 2), blocks)
    _window_flash["trusted"] = difference <= WINDOW_CHECK_BOUND
    if not _window_flash["trusted"]:
        fallbacks.record(
            WINDOW_FLASH,
            BLOCKS,
            f"its first chunk differs from the blocks by {difference:.3g} (relative; bound "
            f"{WINDOW_CHECK_BOUND:g})",
        )
        return None
    return whole


def step_attention(q, handle: LayerKV, scaling: float, window: int | None) -> torch.Tensor:
    """[1, H, T, D] -> [1, T, H, D] for every token of the step (module docstring)."""
    layout = handle.layout
    _, h, t, d = q.shape
    kv = handle.k.shape[0]
    g = h // kv
    a0, a1 = layout.row_start, layout.row_end
    rows_out = None
    if a1 > a0:
        rows = q[0].transpose(0, 1)[a0:a1].reshape(a1 - a0, kv, g, d)  # [n, kv, g, D]
        rows_out = _row_attention(rows, handle, layout, scaling, window).reshape(a1 - a0, h, d)
    if not layout.prefix_chunks and rows_out is not None:  # the common step: rows, then pads
        return F.pad(rows_out, (0, 0, 0, 0, 0, t - a1)).unsqueeze(0)
    out = q.new_empty(1, t, h, d)
    chunks = layout.prefix_chunks
    if layout.paged is not None and chunks:  # all chunks in one launch, fixed splits (module doc)
        from nudgeability.engine.invariant.cuda import paged_attention as paged  # Triton: lazily

        queries = q[0, :, : chunks[-1].t1].transpose(0, 1)
        out[0, : chunks[-1].t1] = paged.chunk_attention(
            queries, handle.k, handle.v, layout.positions[0], layout.paged, scaling, window
        )
        chunks = []
    for index, chunk in enumerate(chunks):
        if fixed_shape_cpu(q):
            out[:, chunk.t0 : chunk.t1] = cpu_attention.prefix_chunk(
                q, handle, layout, index, chunk, scaling, window
            )
            continue
        k0 = 0 if window is None else max(0, chunk.c0 - window + 1)
        keys = handle.k[:, chunk.start + k0 : chunk.start + chunk.c1].unsqueeze(0)
        values = handle.v[:, chunk.start + k0 : chunk.start + chunk.c1].unsqueeze(0)
        qc = q[:, :, chunk.t0 : chunk.t1]
        whole = None
        if whole_chunk(q, window):
            whole = _flash_chunk(qc, keys, values, scaling, window, chunk.c0, k0)
        if whole is not None:  # one flash call for the chunk (lse_kernels.causal_cuda)
            out[:, chunk.t0 : chunk.t1] = whole.transpose(1, 2)
            continue
        out[:, chunk.t0 : chunk.t1] = _causal_self_attention(
            qc, keys, values, scaling, window, chunk.c0, k0
        )
    if rows_out is not None:
        out[0, a0:a1] = rows_out
    if t > a1:
        out[:, a1:] = 0
    return out


def _row_attention(rows, handle: LayerKV, layout: StepLayout, scaling, window) -> torch.Tensor:
    """Every row token against its group's prefix and its own row's slots, merged: [n, kv, g, D]."""
    if layout.paged is not None:  # the batch-invariant paged kernel (module docstring)
        from nudgeability.engine.invariant.cuda import paged_attention as paged  # Triton: lazily

        n, kv, g, d = rows.shape
        out = paged.row_attention(
            rows.reshape(n, kv * g, d),
            handle.k,
            handle.v,
            layout.row_positions,
            layout.paged,
            scaling,
            window,
        )
        return out.view(n, kv, g, d)
    if fixed_shape_cpu(rows):  # segments read once for all groups, pieces on the cores
        computed, parts = cpu_decode_rows.row_parts(rows, handle, layout, scaling, window)
        o_s, lse_s = _suffix_attention(rows, handle, layout, scaling, window, computed)
    else:
        o_s, lse_s = _suffix_attention(rows, handle, layout, scaling, window)
        parts = [
            _prefix_attention(rows, handle, layout, span, i, scaling, window)
            for i, span in enumerate(layout.groups)
        ]
    if all(p is None for p in parts):
        return o_s
    if len(parts) == 1:
        o_p, lse_p = parts[0]
    else:
        low = torch.finfo(torch.float32).min  # a group with no prefix: its tokens keep o_s
        o_p = torch.cat(
            [
                p[0] if p is not None else torch.zeros_like(o_s[s.a0 : s.a1])
                for p, s in zip(parts, layout.groups)
            ]
        )
        lse_p = torch.cat(
            [
                p[1] if p is not None else torch.full_like(lse_s[s.a0 : s.a1], low)
                for p, s in zip(parts, layout.groups)
            ]
        )
    return merge(o_s, lse_s, o_p, lse_p)[0]


def _prefix_attention(
    rows, handle: LayerKV, layout: StepLayout, span: GroupSpan, index, scaling, window
):
    """(output [n, kv, g, D], lse [n, kv, g]) of one group's row tokens over its prefix
    segments, or None when it has none; the tokens folded into the query rows. Off CPU: on CPU
    `cpu_decode_rows.row_parts` reads each segment once for every group that shares it."""
    n = span.a1 - span.a0
    if not span.segments:
        return None
    _, kv, g, d = rows.shape
    folded = rows[span.a0 : span.a1].permute(1, 0, 2, 3).reshape(1, kv, n * g, d)
    merged = None
    for j, (start, length, offset) in enumerate(span.segments):
        # On a sliding layer, keys before prefix_len - window + 1 are hidden from every row token
        # (all sit at prefix_len or later): the view starts there, fixed by the group alone, so
        # that a token's keys sit in the same places whatever else runs in the step.
        lo = 0 if window is None else max(0, span.prefix_len - window + 1 - offset)
        if lo >= length:
            continue  # the window hides the whole segment from every query
        keys = handle.k[:, start + lo : start + length].unsqueeze(0)
        values = handle.v[:, start + lo : start + length].unsqueeze(0)
        bias = None
        if window is not None:
            bias = _prefix_window_bias(
                layout, span, index, j, offset + lo, length - lo, window, g, rows.dtype
            )
        o, lse = _attend(folded, keys, values, bias, scaling)
        if merged is not None:  # in the row view, so that each row's elements stay together
            o, lse = merge(*merged, *_rows(o, lse, kv, n, g, d), with_lse=True)
            merged = (o, lse)
            continue
        merged = _rows(o, lse, kv, n, g, d)
    return merged


def _rows(o, lse, kv: int, n: int, g: int, d: int):
    """A folded part's output `[1, kv, n*g, D]` and lse `[1, kv, n*g]` in the row view
    `[n, kv, g, D]`, `[n, kv, g]`."""
    return o.view(kv, n, g, d).permute(1, 0, 2, 3), lse.view(kv, n, g).permute(1, 0, 2)


def _suffix_attention(rows, handle: LayerKV, layout: StepLayout, scaling, window, computed=None):
    """(output, lse) of every row token over its own row's slots up to its own, in row-token
    order (`computed`: each part's, already computed on the cores; always given on CPU)."""
    n_tok, kv, g, d = rows.shape
    outs, lses = [], []
    for index, part in enumerate(layout.parts):
        if computed is not None:
            outs.append(computed[index][0])
            lses.append(computed[index][1])
            continue
        if part.width == 1:
            q = rows if layout.part_index is None else rows.index_select(0, part.tokens.view(-1))
        else:
            q = rows.index_select(0, part.tokens.view(-1)).view(part.rows, part.width, kv, g, d)
            q = q.permute(0, 2, 1, 3, 4).reshape(part.rows, kv, part.width * g, d)
        keys = handle.k.index_select(1, part.gather).view(kv, part.rows, part.hw, d).transpose(0, 1)
        values = (
            handle.v.index_select(1, part.gather).view(kv, part.rows, part.hw, d).transpose(0, 1)
        )
        bias = _suffix_bias(layout, part, index, window, g, rows.dtype)
        o, lse = _attend(q, keys, values, bias, scaling)
        if part.width > 1:
            o = o.view(part.rows, kv, part.width, g, d).permute(0, 2, 1, 3, 4).reshape(-1, kv, g, d)
            lse = lse.view(part.rows, kv, part.width, g).permute(0, 2, 1, 3).reshape(-1, kv, g)
            o, lse = o.index_select(0, part.real), lse.index_select(0, part.real)
        outs.append(o)
        lses.append(lse)
    if layout.part_index is None:
        return outs[0], lses[0]
    o_s = rows.new_empty(n_tok, kv, g, d)
    lse_s = torch.empty(n_tok, kv, g, dtype=lses[0].dtype, device=rows.device)
    o_s.index_copy_(0, layout.part_index, torch.cat(outs) if len(outs) > 1 else outs[0])
    lse_s.index_copy_(0, layout.part_index, torch.cat(lses) if len(lses) > 1 else lses[0])
    return o_s, lse_s


# --- masks, built once per step and window, shared by every layer -----------------------------
def _bias(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An additive attention bias: 0 where visible, the dtype's lowest finite value where hidden.

    Finite on purpose: a query that sees no key at all (a prefix hidden by a window) then gets a
    log-sum-exp near that lowest value, which weighs nothing in the merge, instead of NaN.
    """
    return torch.where(visible, 0.0, torch.finfo(dtype).min).to(dtype)


def _suffix_bias(layout: StepLayout, part: SuffixPart, index: int, window, g: int, dtype):
    """`[n, 1, L*g, hw]` (`[n, 1, 1, hw]` for a decode part): query i of row k, at slot
    first_slot[k] + i, sees key slot j when j <= its slot (and within the window)."""
    key = ("suffix", index, window, g, dtype)
    if key in layout.per_call:
        return layout.per_call[key]
    i = part.first_slot[:, None] + torch.arange(part.width, device=part.first_slot.device)
    j = torch.arange(part.hw, device=i.device)
    visible = j[None, None, :] <= i[:, :, None]  # [n, L, hw]
    if window is not None:
        visible &= (i[:, :, None] - j[None, None, :]) < window
    if part.width == 1:
        visible = visible[:, None]  # [n, 1, 1, hw], broadcast over the g query heads
    else:
        visible = visible.repeat_interleave(g, dim=1)[:, None]  # (L, g) order, as the queries
    layout.per_call[key] = _bias(visible, dtype)
    return layout.per_call[key]


def _prefix_window_bias(layout, span: GroupSpan, index, segment, k_first, keys, window, g, dtype):
    """`[1, 1, n*g, keys]` on a sliding layer: a folded query sees prefix key position p when
    q_pos - p < window (every prefix key is before every row token)."""
    key = ("prefix", index, segment, k_first, window, g, dtype)
    if key in layout.per_call:
        return layout.per_call[key]
    qpos = layout.row_positions[span.a0 : span.a1].repeat_interleave(g)
    kpos = k_first + torch.arange(keys, device=qpos.device)
    visible = (qpos[:, None] - kpos[None, :]) < window
    layout.per_call[key] = _bias(visible[None, None], dtype)
    return layout.per_call[key]


# --- kernels --------------------------------------------------------------------------------------
def _causal_self_attention(
    q, k, v, scaling: float, window: int | None, q0: int = 0, k0: int = 0
) -> torch.Tensor:
    """Causal (optionally windowed) attention of a chunk: [1,H,L,D] -> [1,L,H,D].

    The queries sit at positions [q0, q0+L), the keys at [k0, q0+L). SDPA's fused kernel runs one
    block of PREFILL_QUERY_BLOCK queries at a time against the keys it can see, with a boolean
    mask: on CPU faster than one `is_causal` call, whose kernel scores every key for
    every query block. Blocks start at fixed offsets of the chunk, so the result depends on the
    prefix alone.
    """
    length = q.shape[2]
    out = torch.empty_like(q)
    for b0 in range(0, length, PREFILL_QUERY_BLOCK):
        b1 = min(b0 + PREFILL_QUERY_BLOCK, length)
        first = k0 if window is None else max(k0, q0 + b0 - window + 1)
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


def _attend(q, k, v, bias, scaling: float):
    """Attention of q `[B, h, M, D]` over k/v `[B, h, S, D]` with an additive `bias` (None: every
    key visible): the normalised output (q's dtype) and the fp32 log-sum-exp `[B, h, M]`."""
    if q.device.type == "cpu":
        # One fused op (the CPU flash kernel behind SDPA), which also returns the log-sum-exp.
        out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, False, attn_mask=bias, scale=scaling
        )
        return out[0], out[1]
    if q.device.type == "cuda":
        return attend_cuda(q, k, v, bias, scaling)
    return attend_explicit(q, k, v, bias, scaling)  # other devices: plain matmuls


AttentionInterface.register(NAME, shared_prefix_attention)
