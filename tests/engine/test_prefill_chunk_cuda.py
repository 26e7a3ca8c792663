"""A prefill chunk on CUDA is one causal flash call (`lse_kernels.causal_cuda`), run here on CPU
with a stand-in that computes what torch's flash op computes from the same arguments.

The op's contract, from torch's own source: `torch.ops.aten._scaled_dot_product_flash_attention(
q, k, v, dropout_p, is_causal, return_debug_mask, *, scale)` takes q `[B, H, L, D]` and k, v
`[B, Hk, S, D]` with Hk dividing H (flash's `mha_fwd` checks "Number of heads in key/value must
divide number of heads in query"; query head h reads key head h // (H / Hk), the grouping
`enable_gqa` makes with `repeat_interleave`), fp16/bf16 only, no mask; with `is_causal` the
diagonal is aligned to the bottom right, query i seeing keys j <= i + S - L
(torch/nn/attention/bias.py, `CausalBias._dispatch`: "Flash accepts causal = True and for this
particular op it means lower right"). It returns (output, logsumexp, ...).

The engine's greedy tokens and logits with the chunk path on must match HF's own forward of the
same sequences; the same stand-in with the diagonal at the top left (SDPA's `is_causal` for
L != S) must not, so that the check can tell the alignments apart.
"""

from __future__ import annotations

import collections

import pytest
import torch
from helpers.cuda_standins import lse_padded
from helpers.engine_reference import random_ids

import nudgeability.engine.attention.lse_kernels as lse_kernels
import nudgeability.engine.attention.shared_prefix_attention as attention
from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.testing.tiny import tiny_model

HALF = (torch.float16, torch.bfloat16)


def flash_as_torch_computes_it(lower_right: bool, seen: collections.Counter):
    def flash(q, k, v, dropout, causal, debug, *, scale):
        b, h, length, d = q.shape
        hk, keys = k.shape[1], k.shape[2]
        assert q.dtype in HALF and k.dtype == v.dtype == q.dtype and d <= 256 and d % 8 == 0
        assert h % hk == 0 and dropout == 0.0 and not debug
        kx = k.repeat_interleave(h // hk, dim=1).double()
        vx = v.repeat_interleave(h // hk, dim=1).double()
        scores = (q.double() @ kx.transpose(-1, -2)) * scale
        if causal:
            shift = keys - length if lower_right else 0
            i = torch.arange(length)[:, None]
            scores = scores.masked_fill(torch.arange(keys)[None, :] > i + shift, float("-inf"))
            seen["causal S>L" if keys > length else "causal S=L"] += 1
        lse = torch.logsumexp(scores, dim=-1)
        out = (torch.softmax(scores, dim=-1) @ vx).to(q.dtype)
        return out, lse.float()

    return flash


def efficient_standin(q, k, v, bias, compute_lse, dropout, causal, *, scale):
    """The row tokens' kernel (not under test here): its output and lse, padded to 32 queries."""
    out, lse = lse_kernels.attend_explicit(q, k, v, bias, scale)
    return out, lse_padded(lse, q.shape[2])


def _engine_against_hf(monkeypatch, lower_right: bool):
    seen = collections.Counter()
    monkeypatch.setitem(lse_kernels.CUDA_KERNELS, "efficient", efficient_standin)
    monkeypatch.setitem(
        lse_kernels.CUDA_KERNELS, "flash", flash_as_torch_computes_it(lower_right, seen)
    )
    monkeypatch.setattr(attention, "fixed_shape_cpu", lambda t: False)
    monkeypatch.setattr(attention, "whole_chunk", lambda t, window: window is None)
    monkeypatch.setattr(attention, "_attend", lse_kernels.attend_cuda)
    model = tiny_model("qwen3", seed=3).to(torch.float16)  # 4 query heads per key head
    prompt = random_ids(70, seed=21)
    engine = Engine(model, prefill_tokens=32)  # chunks at 0, 32, 64: two with S > L
    (out,) = engine.generate([prompt], SamplingParams(max_new_tokens=4), return_logits=True)
    ids = torch.tensor([prompt + out.token_ids[:-1]])
    with torch.inference_mode():
        ref = model(input_ids=ids).logits[0, len(prompt) - 1 :].float()
    gap = ((out.logits.float() - ref).abs().max() / ref.abs().max()).item()
    return gap, seen


def test_a_prefill_in_chunks_through_one_flash_call_each_matches_hf(monkeypatch):
    gap, seen = _engine_against_hf(monkeypatch, lower_right=True)
    assert seen["causal S>L"] > 0, seen  # the later chunks ran as whole flash calls
    assert gap < 1e-2, gap  # fp16 rounding of two paths


def test_the_check_tells_a_top_left_diagonal_apart(monkeypatch):
    gap, seen = _engine_against_hf(monkeypatch, lower_right=False)
    assert seen["causal S>L"] > 0
    assert gap > 1e-1, gap


def test_a_sliding_window_layer_keeps_the_blocks():
    """Flash's op takes no window: a windowed layer's chunk is never sent to it."""
    q = torch.zeros(1, 4, 8, 16, dtype=torch.float16)
    assert attention.whole_chunk(q, None) is False  # on CPU: the fixed-shape blocks
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda")))
        assert attention.whole_chunk(q, 16) is False and attention.whole_chunk(q, None) is True
