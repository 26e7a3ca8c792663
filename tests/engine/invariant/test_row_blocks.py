"""The products' cheaper calls (engine/invariant/cpu/products.py, *Blocks*): a product's 1024-, 256- and 64-row blocks, and on
one core a weight whole instead of its two column halves. Where they are taken, every row has the
bits the library's kernel gives it in a 16-row tile of a half, checked against a loop written
here on SmolLM2's weight shapes, packed and dense, at one and two cores; and where a block or
the whole weight would not give those bits, the guard keeps the tiles and halves (the negative
controls: a kernel that changes one last bit)."""

from __future__ import annotations

import pytest
import torch

from nudgeability.engine.invariant.cpu import products as invariant
from nudgeability.engine.invariant.cpu import weights
from nudgeability.engine.invariant.cpu.products import (
    BLOCK_SIZES,
    blocks_agree,
    onednn_product,
    row_blocks,
)
from nudgeability.engine.invariant.cpu.weights import TILE_ROWS, reorder_slices
from nudgeability.engine.invariant.linears import invariant_forward, product

pytestmark = pytest.mark.skipif(not weights.ONEDNN, reason="torch built without oneDNN")

# SmolLM2-135M's linears: q and o [576, 576], k and v [192, 576], gate and up [1536, 576],
# down [576, 1536]
SHAPES = [(576, 576), (192, 576), (1536, 576), (576, 1536)]


def _tile_loop(x: torch.Tensor, parts: list[torch.Tensor]) -> torch.Tensor:
    """Every 16-row tile (zero-padded) times every slice, one library call each, in turn."""
    m, k = x.shape
    padded = -(-m // TILE_ROWS) * TILE_ROWS
    xp = torch.cat([x, x.new_zeros(padded - m, k)])
    columns = []
    for part in parts:
        tiles = [
            torch.ops.mkldnn._linear_pointwise(xp[t : t + TILE_ROWS], part, None, "none", [], "")
            for t in range(0, padded, TILE_ROWS)
        ]
        columns.append(torch.cat(tiles))
    return torch.cat(columns, dim=1)[:m]


def _parts(weight: torch.Tensor, packed: bool) -> list[torch.Tensor]:
    slices = weights.column_slices(weight.shape[0])
    if packed:
        return reorder_slices(weight, slices)
    return [weight[s0:s1].contiguous() for s0, s1 in slices]


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "dense"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_product_in_blocks_gives_every_row_its_tile_bits(shape, packed, cores):
    n, k = shape
    torch.manual_seed(n + k)
    weight = torch.randn(n, k) * 0.05
    parts = _parts(weight, packed)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for m in (64, 256, 1024 + 256 + 64 + 5, 5 * 64 - 3, 16 * 3 + 1, 1020):
            x = torch.randn(m, k)
            expected = _tile_loop(x, parts)
            for count in (1, 2):
                cores(count)
                assert torch.equal(onednn_product(x, parts), expected), (m, count)
            # a row alone (one tile) has the bits it has inside the blocks
            assert torch.equal(onednn_product(x[m // 2 : m // 2 + 1], parts)[0], expected[m // 2])
    finally:
        torch.set_num_threads(before)
    exact = (x.double() @ weight.double().t()).float()
    torch.testing.assert_close(expected, exact, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("size", BLOCK_SIZES)
def test_where_a_block_would_change_a_bit_the_product_stays_in_tiles(size, monkeypatch, cores):
    """The negative control: a kernel that changes the last bit of one row in calls of one block
    size. The guard sees it and the product keeps the tile loop's bits (the other size, whose
    calls are right, may still be taken); forced into blocks, it does not."""
    cores(1)
    real = weights.onednn_tile

    def off_by_a_bit(x: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
        out = real(x, part)
        if x.shape[0] == size:
            out[7] = torch.nextafter(out[7], torch.full_like(out[7], torch.inf))
        return out

    monkeypatch.setattr(invariant, "onednn_tile", off_by_a_bit)
    monkeypatch.setattr(invariant, "_AGREE", {})
    torch.manual_seed(0)
    weight = torch.randn(192, 576) * 0.05
    parts = _parts(weight, packed=True)
    x = torch.randn(1024 + 256 + 2 * 64 + 16, 576)  # a call of each size, and a tile
    expected = _tile_loop(x, parts)
    assert not blocks_agree(parts[0], size)
    assert torch.equal(onednn_product(x, parts), expected)
    monkeypatch.setattr(invariant, "blocks_agree", lambda part, size: True)
    assert not torch.equal(onednn_product(x, parts), expected)


@pytest.mark.parametrize("rows", [16, 48, 64, 80, 256, 336, 1296, 2400])
@pytest.mark.parametrize("sizes", [(), (64,), (256,), (256, 64), (1024, 256, 64)], ids=str)
def test_the_calls_cover_every_row_once_and_the_runs_every_call_once(rows, sizes):
    blocks = row_blocks(rows, sizes)
    covered = [r for a, b in blocks for r in range(a, b)]
    assert covered == list(range(rows))
    assert all(b - a in (*sizes, TILE_ROWS) for a, b in blocks)
    # whole blocks first, the largest as many as fit, then the next on what is left
    left = rows
    for size in sorted(sizes, reverse=True):
        assert sum(b - a == size for a, b in blocks) == left // size
        left %= size
    assert [b - a for a, b in blocks] == sorted((b - a for a, b in blocks), reverse=True)
    for count in (1, 2, 3, 4):
        runs = invariant._runs(blocks, count)
        assert [i for a, b in runs for i in range(a, b)] == list(range(len(blocks)))
        assert len(runs) <= count


def _halves_loop(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The weight's two `column_slices` halves, each reordered here by oneDNN's own op, tile by
    tile: the canonical bits."""
    halves = [
        torch.ops.mkldnn._reorder_linear_weight(weight[s0:s1].contiguous(), TILE_ROWS)
        for s0, s1 in weights.column_slices(weight.shape[0])
    ]
    return _tile_loop(x, halves)


@pytest.mark.parametrize("shape", [(576, 576), (1536, 576), (576, 1536)], ids=str)
def test_on_one_core_a_weight_runs_whole_with_the_bits_of_its_halves(shape, cores):
    n, k = shape
    torch.manual_seed(n * 3 + k)
    weight = torch.nn.Parameter(torch.randn(n, k) * 0.05, requires_grad=False)
    expected = {}
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for m in (1, 12, 3 * 64 + 7, 256 + 64 + 7):
            x = torch.randn(m, k)
            expected[m] = (x, _halves_loop(x, weight.detach()))
    finally:
        torch.set_num_threads(before)
    for count in (1, 2):
        torch.set_num_threads(count)
        try:
            with invariant_forward():
                for m, (x, want) in expected.items():
                    assert torch.equal(product(x, weight), want), (m, count)
                slices = weights._PACKED[id(weight)][0][-1]
        finally:
            torch.set_num_threads(before)
        whole = count == 1 and weights.whole_agrees(n, k)
        assert slices == (((0, n),) if whole else tuple(weights.column_slices(n)))


def test_where_the_whole_weight_would_change_a_bit_the_halves_run(monkeypatch):
    """The negative control: a kernel that changes one column's last bit when it is given the
    whole weight. The guard sees it and one core keeps the halves."""
    real = weights.onednn_tile
    n, k = 576, 576

    def off_by_a_bit(x: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
        out = real(x, part)
        if part.shape[0] == n:
            out[:, 3] = torch.nextafter(out[:, 3], torch.full_like(out[:, 3], torch.inf))
        return out

    monkeypatch.setattr(weights, "onednn_tile", off_by_a_bit)
    monkeypatch.setattr(weights, "_WHOLE", {})
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert not weights.whole_agrees(n, k)
        assert weights.product_slices(n, k, 1) == weights.column_slices(n)
    finally:
        torch.set_num_threads(before)
