"""The attention's cheaper calls give every query the bits of the narrow call they stand for
(engine/invariant/cpu/attention.py):

- a prefill chunk's tokens of one row packed into one kernel item (`own_keys_attention`,
  `packing_agrees`) against each token alone, the shape a decode step gives it;
- a shared-keys call of many rows in WIDE_TILE-row query tiles (`query_tile`,
  `wide_tiles_agree`) against QUERY_TILE-row tiles.

The references are loops written here over ATen's CPU flash kernel in the narrow shape, and a
float64 softmax over the visible keys for the values. Each guard is checked both ways: a call
faulted in its cheaper shape only is caught, and the narrow call is kept; forced past the guard,
the same fault changes the output."""

from __future__ import annotations

import pytest
import torch
from helpers.engine_reference import random_ids

import nudgeability.engine.attention.cpu_attention as cpu_attention
import nudgeability.engine.invariant.cpu.attention as fixed_shape
from nudgeability.engine import Engine, SamplingParams
from nudgeability.engine.invariant.cpu.attention import (
    OWN_QUERY_ROWS,
    QUERY_TILE,
    WIDE_FROM,
    WIDE_TILE,
    lowest,
    own_keys_attention,
    own_tokens_per_item,
    pack_bias,
    packing_agrees,
    query_tile,
    shared_keys_attention,
    wide_tiles_agree,
)
from nudgeability.models.testing.tiny import tiny_model

KERNEL = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


@pytest.fixture
def one_torch_thread():
    """The kernel on one torch thread, as the engine calls it (engine/invariant/cpu/products.py,
    `invariant_products`: the process's threads become whole calls on `CORES`). At two torch
    threads ATen's kernel deals one call's items to OpenMP threads, and measured on an AMD EPYC
    (Zen 3, AVX2, MKL 2024.2) the items its second thread computes get other bits than the same
    items computed on its first: a property of the library's threading, not of the call's shape."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
@pytest.mark.usefixtures("one_torch_thread")
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


@pytest.mark.usefixtures("one_torch_thread")
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
    monkeypatch.setattr(cpu_attention, "own_keys_attention", faulty)
    monkeypatch.setattr(fixed_shape, "_PACKING", {})


@pytest.mark.usefixtures("one_torch_thread")
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
    """The whole path (`cpu_attention.own_keys_rows` under the guard): arms whose suffixes are
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
    monkeypatch.setattr(cpu_attention, "packing_agrees", lambda *a: True)
    forced = _fork_logits(model, prefix, suffixes)
    assert not all(torch.equal(a, b) for a, b in zip(forced, per_token))


def test_a_packed_bias_over_its_cap_keeps_one_token_per_item(monkeypatch):
    """The packed bias holds each token's row g times over; past PACKED_BIAS_BYTES the rows keep
    one token per item. With packing forced past its guard and faulted, a cap of 0 keeps every
    call narrow (the logits of packing off); the byte count is the tensor `pack_bias` builds."""
    bias = _inputs(2, 30, 3, 128, 64, torch.bfloat16)[3]
    assert fixed_shape.packed_bias_bytes(2, 30, 15, 3, 128, torch.bfloat16) == (
        pack_bias(bias, 15, 3).numel() * 2
    )
    model = tiny_model("llama", num_layers=2, seed=3)
    prefix = random_ids(40, seed=1)
    suffixes = [random_ids(n, seed=n) for n in (30, 61)]
    with monkeypatch.context() as m:
        m.setattr(fixed_shape, "OWN_QUERY_ROWS", 1)
        per_token = _fork_logits(model, prefix, suffixes)
    _off_by_a_bit_when_packed(monkeypatch)
    monkeypatch.setattr(cpu_attention, "packing_agrees", lambda *a: True)
    calls = []
    faulty = cpu_attention.own_keys_attention

    def counted(q, k, v, bias, scaling, tokens=1):
        calls.append(tokens)
        return faulty(q, k, v, bias, scaling, tokens)

    monkeypatch.setattr(cpu_attention, "own_keys_attention", counted)
    monkeypatch.setattr(cpu_attention, "PACKED_BIAS_BYTES", 0)
    capped = _fork_logits(model, prefix, suffixes)
    assert calls and set(calls) == {1}
    assert all(torch.equal(a, b) for a, b in zip(capped, per_token))
    monkeypatch.setattr(cpu_attention, "PACKED_BIAS_BYTES", 1 << 40)
    calls.clear()
    uncapped = _fork_logits(model, prefix, suffixes)
    assert max(calls) > 1  # the control: the same run under a loose cap packs, and the fault shows
    assert not all(torch.equal(a, b) for a, b in zip(uncapped, per_token))


def _shared_inputs(rows, keys, dtype, masked, seed=0):
    gen = torch.Generator().manual_seed(seed)
    folded = torch.randn(3, rows, 64, generator=gen).to(dtype)
    k = torch.randn(3, keys, 64, generator=gen).to(dtype)
    v = torch.randn(3, keys, 64, generator=gen).to(dtype)
    real = torch.arange(keys) < (keys - keys // 4 if masked else keys)
    bias = torch.where(real, 0.0, lowest(dtype)).to(dtype).view(1, 1, 1, keys) if masked else None
    return folded, k, v, bias, real


def _narrow_tiles(folded, k, v, bias, scaling):
    """Every QUERY_TILE rows in their own kernel call, keys shared: the narrow shape."""
    kv, rows, d = folded.shape
    total = -(-rows // QUERY_TILE) * QUERY_TILE
    q = torch.nn.functional.pad(folded, (0, 0, 0, total - rows))
    outs, lses = [], []
    for t in range(0, total, QUERY_TILE):
        o, x = KERNEL(
            q[None, :, t : t + QUERY_TILE],
            k[None],
            v[None],
            0.0,
            False,
            attn_mask=bias,
            scale=scaling,
        )[:2]
        outs.append(o[0])
        lses.append(x[0])
    return torch.cat(outs, dim=1)[:, :rows], torch.cat(lses, dim=1)[:, :rows]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("rows", "keys", "masked"), [(729, 1024, False), (200, 256, True), (130, 512, True)]
)
@pytest.mark.usefixtures("one_torch_thread")
def test_wide_tiles_give_each_row_its_narrow_tile_bits(dtype, rows, keys, masked):
    folded, k, v, bias, real = _shared_inputs(rows, keys, dtype, masked)
    scaling = 64**-0.5
    expected = _narrow_tiles(folded, k, v, bias, scaling)
    assert query_tile(rows, keys, 64, dtype, bias) == (
        WIDE_TILE if wide_tiles_agree(keys, 64, dtype, masked) else QUERY_TILE
    )
    got = shared_keys_attention(folded, k, v, bias, scaling)  # the engine's choice
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    s = torch.einsum("hrd,hsd->hrs", folded.double(), k.double()) * scaling
    s = s.masked_fill(~real, float("-inf"))
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(
        got[0].double(), torch.einsum("hrs,hsd->hrd", s.softmax(-1), v.double()), rtol=tol, atol=tol
    )


def test_few_rows_and_per_tile_biases_keep_narrow_tiles():
    assert query_tile(WIDE_FROM - 1, 1024, 64, torch.float32, None) == QUERY_TILE
    per_tile = torch.zeros(1, 46, QUERY_TILE, 1024)  # a sliding layer's bias, laid out in 16s
    assert query_tile(729, 1024, 64, torch.float32, per_tile) == QUERY_TILE


@pytest.mark.usefixtures("one_torch_thread")
def test_a_kernel_that_changes_a_wide_tile_bit_keeps_narrow_tiles(monkeypatch):
    rows, keys = 729, 1024
    folded, k, v, bias, _ = _shared_inputs(rows, keys, torch.float32, False)
    expected = _narrow_tiles(folded, k, v, bias, 64**-0.5)
    real = fixed_shape._flash

    def faulty(q, *args, **kwargs):
        out = real(q, *args, **kwargs)
        if q.shape[2] == WIDE_TILE:  # the last bit of every wide tile's first row
            o = out[0]
            o[:, :, 0] = torch.nextafter(o[:, :, 0], torch.full_like(o[:, :, 0], torch.inf))
        return out

    monkeypatch.setattr(fixed_shape, "_flash", faulty)
    monkeypatch.setattr(fixed_shape, "_WIDE", {})
    assert not wide_tiles_agree(keys, 64, torch.float32, False)
    got = shared_keys_attention(folded, k, v, bias, 64**-0.5)
    assert torch.equal(got[0], expected[0])
    forced = shared_keys_attention(folded, k, v, bias, 64**-0.5, WIDE_TILE)
    assert not torch.equal(forced[0], expected[0])
