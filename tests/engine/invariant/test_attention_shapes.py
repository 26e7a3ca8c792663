"""A prefix segment's keys read in place from the pool give the bits of a zero-padded copy.

engine/attention/cpu_attention.py `_segment_keys` lets the pool slots after a segment stand for
the padding to the segment's width (one block of 64, 128 or 256 keys for a short segment, else
whole 512-key blocks: `fixed_shape.segment_width`). The test fills those slots with large finite numbers (what
another sequence's K/V could hold) and checks the fixed-shape call gives exactly the copy's
output and log-sum-exp, and both agree with a float64 softmax over the real keys, written here.
"""

from __future__ import annotations

import pytest
import torch

from nudgeability.engine.attention.cpu_attention import _segment_keys
from nudgeability.engine.invariant.cpu.attention import (
    SHARED_BLOCK,
    lowest,
    pad_keys,
    segment_width,
    shared_keys_attention,
)
from nudgeability.engine.kv.kv_cache import LayerKV


def _pool(dtype, slots=2048, kv=3, d=64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(kv, slots, d, generator=gen)
    v = torch.randn(kv, slots, d, generator=gen)
    # what follows the segment: other sequences' entries, large but finite
    k[:, 700:] *= 1e4
    v[:, 700:] *= 1e4
    return LayerKV(layout=None, k=k.to(dtype), v=v.to(dtype), window=None)


def _reference(q, k, v, scaling):
    s = torch.einsum("hrd,hsd->hrs", q.double(), k.double()) * scaling
    return torch.einsum("hrs,hsd->hrd", s.softmax(-1), v.double()), s.logsumexp(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("keys", [1, 37, 64, 65, 200, 256, 257, 511, 513])
def test_keys_read_in_place_give_the_bits_of_zero_padded_keys(dtype, keys):
    handle = _pool(dtype)
    start = 700 - keys  # the segment ends where the large entries begin
    k_in, v_in = _segment_keys(handle, start, keys, None)
    padded = segment_width(keys)
    # the smallest width that holds the keys: 64, 128, 256, then whole 512-key blocks
    assert padded == next(w for w in (64, 128, 256, 512, 1024) if w >= keys)
    assert k_in.shape[1] == padded
    assert k_in.data_ptr() == handle.k[:, start].data_ptr()  # a view of the pool, not a copy
    k_copy = pad_keys(handle.k[:, start : start + keys], padded)
    v_copy = pad_keys(handle.v[:, start : start + keys], padded)
    real = torch.arange(padded) < keys
    bias = None if keys == padded else torch.where(real, 0.0, lowest(dtype)).to(dtype)
    bias = None if bias is None else bias.view(1, 1, 1, padded)
    q = torch.randn(3, 23, 64, generator=torch.Generator().manual_seed(1)).to(dtype)
    scaling = 64**-0.5
    out_in, lse_in = shared_keys_attention(q, k_in, v_in, bias, scaling)
    out_copy, lse_copy = shared_keys_attention(q, k_copy, v_copy, bias, scaling)
    assert torch.equal(out_in, out_copy)
    assert torch.equal(lse_in, lse_copy)
    ref_out, ref_lse = _reference(
        q, handle.k[:, start : start + keys], handle.v[:, start : start + keys], scaling
    )
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out_in.double(), ref_out, atol=tol, rtol=tol)
    torch.testing.assert_close(lse_in.double(), ref_lse, atol=tol, rtol=tol)


def test_keys_past_the_pools_end_fp16_and_sliding_layers_are_copied():
    handle = _pool(torch.float32)
    k, _ = _segment_keys(handle, 2048 - 300, 300, None)  # 512 slots would run past the pool
    assert k.shape[1] == SHARED_BLOCK and k.data_ptr() != handle.k.data_ptr()
    assert torch.equal(k[:, 300:], torch.zeros_like(k[:, 300:]))
    k, _ = _segment_keys(handle, 2048 - 37, 37, None)  # 64 slots would run past the pool
    assert k.shape[1] == 64 and k.data_ptr() != handle.k.data_ptr()
    assert torch.equal(k[:, 37:], torch.zeros_like(k[:, 37:]))
    k, _ = _segment_keys(handle, 0, 37, 4096)  # a sliding layer
    assert torch.equal(k[:, 37:], torch.zeros_like(k[:, 37:]))
    half = _pool(torch.float16)
    k, _ = _segment_keys(half, 0, 37, None)
    assert torch.equal(k[:, 37:], torch.zeros_like(k[:, 37:]))
