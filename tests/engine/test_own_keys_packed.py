"""A prefill chunk's tokens of one row packed into one kernel item give every token the bits it
gets alone, as a decode step computes it (engine/attention/fixed_shape.py `own_keys_attention`,
`packing_agrees`).

The reference is a loop written here: each token's g query heads alone in one call of ATen's CPU
flash kernel against its row's keys under its own bias row, which is the shape a decode step
gives it; and a float64 softmax over the visible keys for the values. The guard is checked both
ways: a kernel that changes the low bits of packed calls only is caught, and the own keys then stay
one token per item; forced past the guard, the same fault changes the output."""

from __future__ import annotations

import pytest
import torch
from helpers.engine_reference import random_ids

import nudgeability.engine.attention.cpu_parts as cpu_parts
import nudgeability.engine.attention.fixed_shape as fixed_shape
from nudgeability.engine import Engine, SamplingParams
from nudgeability.engine.attention.fixed_shape import (
    OWN_QUERY_ROWS,
    lowest,
    own_keys_attention,
    own_tokens_per_item,
    pack_bias,
    packing_agrees,
)
from nudgeability.models.testing.tiny import tiny_model

KERNEL = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def _inputs(n, width, g, hw, d, dtype, window=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(n, width, g, d, generator=gen).to(dtype)
    k = torch.randn(n, 1, hw, d, generator=gen).to(dtype)
    v = torch.randn(n, 1, hw, d, generator=gen).to(dtype)
    first = torch.randint(0, hw - width + 1, (n, 1), generator=gen)
    slot = first + torch.arange(width)  # [n, width]: each token's slot in its row
    j = torch.arange(hw)
    visible = j[None, None, :] <= slot[:, :, None]
    if window is not None:
        visible &= (slot[:, :, None] - j[None, None, :]) < window
    bias = torch.where(visible, 0.0, lowest(dtype)).to(dtype)[:, :, None]
    return q, k, v, bias, visible


def _token_by_token(q, k, v, bias, scaling):
    """Every token alone: its g heads as one kernel item (M = g), as in a decode step."""
    n, width, g, d = q.shape
    o = torch.empty(n, width, g, d, dtype=q.dtype)
    lse = torch.empty(n, width, g)
    for i in range(n):
        for t in range(width):
            out, x = KERNEL(
                q[i : i + 1, t : t + 1],
                k[i : i + 1],
                v[i : i + 1],
                0.0,
                False,
                attn_mask=bias[i : i + 1, t : t + 1],
                scale=scaling,
            )[:2]
            o[i, t], lse[i, t] = out[0, 0], x[0, 0]
    return o, lse


def _float64(q, k, v, visible, scaling):
    s = torch.einsum("ntgd,nsd->ntgs", q.double(), k[:, 0].double()) * scaling
    s = s.masked_fill(~visible[:, :, None, :], float("-inf"))
    return torch.einsum("ntgs,nsd->ntgd", s.softmax(-1), v[:, 0].double())


def test_a_row_is_cut_evenly_into_the_fewest_items_that_fit():
    for g in (1, 3, 4, 8, 16):
        most = OWN_QUERY_ROWS // g
        for width in range(1, 300):
            tokens = own_tokens_per_item(width, g)
            items = -(-width // tokens)
            assert tokens * g <= max(OWN_QUERY_ROWS, g)
            assert items == (1 if width == 1 else -(-width // most))  # the fewest that fit
            assert items * tokens - width < items  # the padding is under one token per item
    assert own_tokens_per_item(1, 3) == 1  # a decode step keeps one token per item
    assert own_tokens_per_item(30, 3) == 30  # the P1 workload's suffixes: one item per row
    assert own_tokens_per_item(243, 3) == 41  # 6 items of 41 (246 slots) rather than 42 + 33


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("width", "g", "hw", "window"),
    [
        (30, 3, 128, None),
        (7, 4, 256, None),
        (50, 3, 640, None),
        (90, 2, 128, 40),
        (33, 8, 384, None),
    ],
)
def test_packed_items_give_each_token_its_decode_bits(dtype, width, g, hw, window):
    n, d, scaling = 4, 64, 64**-0.5
    q, k, v, bias, visible = _inputs(n, width, g, hw, d, dtype, window)
    tokens = own_tokens_per_item(width, g)
    assert tokens > 1
    expected = _token_by_token(q, k, v, bias, scaling)
    if packing_agrees(tokens, g, hw, d, dtype):
        packed = own_keys_attention(q, k, v, pack_bias(bias, tokens, g), scaling, tokens)
        assert torch.equal(packed[0], expected[0]) and torch.equal(packed[1], expected[1])
    one = own_keys_attention(q, k, v, bias, scaling)
    assert torch.equal(one[0], expected[0]) and torch.equal(one[1], expected[1])
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(
        expected[0].double(), _float64(q, k, v, visible, scaling), rtol=tol, atol=tol
    )


def test_on_this_machine_the_p1_shape_packs():
    """Not a property of every machine (the guard decides there), but of the one whose benchmark
    figures RESULTS.md reports: if this fails, the packing is not what was measured."""
    if not packing_agrees(30, 3, 128, 64, torch.float32):
        pytest.skip(
            "this machine's kernel gives a packed row other bits: the own keys stay per token"
        )
    assert packing_agrees(41, 3, 384, 64, torch.float32)


def _off_by_a_bit_when_packed(monkeypatch):
    """Fault the own-keys call wherever it packs tokens (the guard's calls and the engine's); one
    token per item is untouched."""
    real = fixed_shape.own_keys_attention

    def faulty(q, k, v, bias, scaling, tokens=1):
        o, lse = real(q, k, v, bias, scaling, tokens)
        if tokens > 1:  # every output off by a relative 2**-10: a few bits, whole rows
            o = o * (1 + 2**-10)
        return o, lse

    monkeypatch.setattr(fixed_shape, "own_keys_attention", faulty)
    monkeypatch.setattr(cpu_parts, "own_keys_attention", faulty)
    monkeypatch.setattr(fixed_shape, "_PACKING", {})


def test_a_kernel_that_changes_a_packed_bit_keeps_the_own_keys_per_token(monkeypatch):
    width, g, hw, d = 30, 3, 128, 64
    q, k, v, bias, _ = _inputs(2, width, g, hw, d, torch.float32)
    expected = _token_by_token(q, k, v, bias, d**-0.5)
    _off_by_a_bit_when_packed(monkeypatch)
    assert not packing_agrees(width, g, hw, d, torch.float32)
    packed = fixed_shape.own_keys_attention(q, k, v, pack_bias(bias, width, g), d**-0.5, width)
    assert not torch.equal(packed[0], expected[0])  # the fault is real where it is not guarded


def _fork_logits(model, prefix, suffixes):
    engine = Engine(model)
    arms = engine.fork(prefix, suffixes, SamplingParams(max_new_tokens=4), return_logits=True)
    return [torch.stack(list(a.logits)) for a in arms]


def test_an_engine_fork_gives_the_bits_of_one_token_per_item(monkeypatch):
    """The whole path (`cpu_parts.own_keys_rows` under the guard): arms whose suffixes are
    prefilled in packed items get the very logits of the same fork with packing off; with the
    kernel faulted in packed calls the guard turns packing off and the logits stay; forced past
    the guard, the fault reaches the logits."""
    model = tiny_model("llama", num_layers=2, seed=3)
    prefix = random_ids(40, seed=1)
    suffixes = [random_ids(n, seed=n) for n in (5, 30, 61, 140)]
    packed = _fork_logits(model, prefix, suffixes)
    with monkeypatch.context() as m:
        m.setattr(fixed_shape, "OWN_QUERY_ROWS", 1)  # one token per item everywhere
        per_token = _fork_logits(model, prefix, suffixes)
    assert all(torch.equal(a, b) for a, b in zip(packed, per_token))

    _off_by_a_bit_when_packed(monkeypatch)
    guarded = _fork_logits(model, prefix, suffixes)
    assert all(torch.equal(a, b) for a, b in zip(guarded, per_token))
    monkeypatch.setattr(cpu_parts, "packing_agrees", lambda *a: True)
    forced = _fork_logits(model, prefix, suffixes)
    assert not all(torch.equal(a, b) for a, b in zip(forced, per_token))
