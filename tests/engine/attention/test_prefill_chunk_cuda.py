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

A sliding-window layer's chunk is one call of `torch.ops.aten._flash_attention_forward` with
`window_size_left = window - 1`: its contract, from torch's schema (native_functions.yaml:
`_flash_attention_forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
is_causal, return_debug_mask, *, scale, window_size_left, window_size_right, ...)`), q/k/v as
`[B, L, H, D]` with a unit last stride (what `_scaled_dot_product_flash_attention` passes it after
its transpose), and flash's local mask (its README and `mha_fwd`): query i sees keys
[i + S - L - window_size_left, i + S - L + window_size_right], a side of -1 (or one at least S)
unbounded, `is_causal` setting the right side to 0. The engine checks its first windowed chunk
against the 64-query blocks once (`shared_prefix_attention._flash_chunk`); the negative controls
are the same op ignoring the window, caught by that check (and not caught with the check
skipped), and an op that refuses the call.
"""

from __future__ import annotations

import collections

import torch
from helpers.cuda_standins import lse_padded
from helpers.engine_reference import random_ids

import nudgeability.engine.attention.lse_kernels as lse_kernels
import nudgeability.engine.attention.shared_prefix_attention as attention
from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.testing.tiny import tiny_model
from nudgeability.util import fallbacks

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


def flash_window_as_torch_computes_it(seen: collections.Counter, honour_window: bool = True):
    if honour_window is None:  # a torch whose op refuses the call

        def refused(*args, **kwargs):
            seen["refused"] += 1
            raise RuntimeError("FlashAttention does not support this window")

        return refused

    def flash(q, k, v, cum_q, cum_k, max_q, max_k, dropout, causal, debug, *, scale, **window):
        b, length, h, d = q.shape  # flash's own layout, [B, L, H, D]
        keys, hk = k.shape[1], k.shape[2]
        assert cum_q is None and cum_k is None and dropout == 0.0 and not debug
        assert (max_q, max_k) == (length, keys)
        assert q.dtype in HALF and k.dtype == v.dtype == q.dtype and d <= 256 and d % 8 == 0
        assert h % hk == 0 and q.stride(-1) == k.stride(-1) == v.stride(-1) == 1
        left = window.get("window_size_left")
        right = window.get("window_size_right")
        left = -1 if left is None or left >= keys or not honour_window else left
        right = -1 if right is None or right >= keys else right
        if causal:
            right = 0
        qx = q.transpose(1, 2).double()
        kx = k.transpose(1, 2).repeat_interleave(h // hk, dim=1).double()
        vx = v.transpose(1, 2).repeat_interleave(h // hk, dim=1).double()
        scores = (qx @ kx.transpose(-1, -2)) * scale
        diagonal = torch.arange(length)[:, None] + keys - length
        j = torch.arange(keys)[None, :]
        hidden = torch.zeros(length, keys, dtype=torch.bool)
        if right >= 0:
            hidden |= j > diagonal + right
        if left >= 0:
            hidden |= j < diagonal - left
            seen["window"] += 1
        scores = scores.masked_fill(hidden, float("-inf"))
        out = (torch.softmax(scores, dim=-1) @ vx).to(q.dtype).transpose(1, 2)
        return out, torch.logsumexp(scores, dim=-1).float(), None, None, None

    return flash


def efficient_standin(q, k, v, bias, compute_lse, dropout, causal, *, scale):
    """The row tokens' kernel (not under test here): its output and lse, padded to 32 queries."""
    out, lse = lse_kernels.attend_explicit(q, k, v, bias, scale)
    return out, lse_padded(lse, q.shape[2])


def _engine_against_hf(
    monkeypatch, lower_right: bool, window: int | None = None, honour=True, trusted=None
):
    seen = collections.Counter()
    monkeypatch.setitem(lse_kernels.CUDA_KERNELS, "efficient", efficient_standin)
    monkeypatch.setitem(
        lse_kernels.CUDA_KERNELS, "flash", flash_as_torch_computes_it(lower_right, seen)
    )
    monkeypatch.setitem(
        lse_kernels.CUDA_KERNELS, "flash_window", flash_window_as_torch_computes_it(seen, honour)
    )
    monkeypatch.setattr(attention, "fixed_shape_cpu", lambda t: False)
    monkeypatch.setattr(
        attention, "whole_chunk", lambda t, w: w is None or lse_kernels.flash_takes_window()
    )
    monkeypatch.setattr(attention, "_attend", lse_kernels.attend_cuda)
    monkeypatch.setattr(attention, "_window_flash", dict(trusted) if trusted else {})
    fallbacks.reset()
    # 4 query heads per key head; with a window, every other layer slides
    sliding = {}
    if window is not None:
        layers = ["full_attention", "sliding_attention"] * 2
        sliding = dict(use_sliding_window=True, sliding_window=window, layer_types=layers)
    model = tiny_model("qwen3", seed=3, **sliding).to(torch.float16)
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


def test_a_sliding_window_prefill_in_chunks_through_flash_with_its_window_matches_hf(monkeypatch):
    gap, seen = _engine_against_hf(monkeypatch, lower_right=True, window=12)
    assert seen["window"] > 1 and seen["causal S>L"] > 0, seen  # both kinds of layer ran
    assert gap < 1e-2, gap
    assert attention._window_flash == {"trusted": True} and not fallbacks.taken()


def test_a_window_ignored_is_caught_by_the_first_chunks_check(monkeypatch):
    """The negative control: flash ignoring the window. Checked, the first windowed chunk
    disagrees with the blocks, the fallback is recorded and the blocks run; with the check
    skipped (a process that trusted the call), the logits move far from HF's."""
    gap, _ = _engine_against_hf(monkeypatch, lower_right=True, window=12, honour=False)
    assert gap < 1e-2, gap
    assert attention._window_flash == {"trusted": False}
    assert [f.path for f in fallbacks.taken()] == [attention.WINDOW_FLASH]
    gap, _ = _engine_against_hf(
        monkeypatch, lower_right=True, window=12, honour=False, trusted={"trusted": True}
    )
    assert gap > 1e-1, gap


def test_a_torch_that_refuses_the_windowed_call_keeps_the_blocks(monkeypatch):
    gap, seen = _engine_against_hf(monkeypatch, lower_right=True, window=12, honour=None)
    assert seen["refused"] == 1 and gap < 1e-2, (seen, gap)  # tried once, then the blocks
    assert "the call failed" in fallbacks.taken()[0].reason


def test_torch_s_flash_op_takes_a_window_and_a_torch_without_it_keeps_the_blocks(monkeypatch):
    """The schema this torch has (native_functions.yaml) names `window_size_left`; where an older
    torch's does not, a windowed layer's chunk runs the 64-query blocks, and on CPU it always
    does (the fixed-shape calls)."""
    assert lse_kernels.flash_takes_window()
    q = torch.zeros(1, 4, 8, 16, dtype=torch.float16)
    assert attention.whole_chunk(q, None) is False and attention.whole_chunk(q, 16) is False
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda")))
    assert attention.whole_chunk(q, 16) is True and attention.whole_chunk(q, None) is True
    monkeypatch.setattr(attention, "flash_takes_window", lambda: False)
    assert attention.whole_chunk(q, 16) is False and attention.whole_chunk(q, None) is True
