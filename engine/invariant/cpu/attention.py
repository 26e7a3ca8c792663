"""CPU attention whose every kernel call has one of two fixed shapes, whatever the batch.

ATen's CPU flash kernel (`_scaled_dot_product_flash_attention_for_cpu`,
aten/src/ATen/native/cpu/FlashAttentionKernel.cpp) cuts the queries of a call into blocks of 32,
64 or 256 (chosen by the query count: thresholds 192 and 768) and the keys into blocks of
min(512, keys); a short trailing block is a GEMM of another shape, and a query's bits then
change with how many other queries share its call, under every MKL branch tried. So a query's result depended on the batch. Here the calls are
shaped so that the kernel's blocking is fixed by the part of the step alone:

- **shared keys** (a group's prefix for its folded row tokens): query rows in tiles of exactly
  `QUERY_TILE` (16; the tiles are the call's heads, the keys a stride-0 view shared by all;
  `WIDE_TILE` rows in a call of many rows where a check on the machine gives a row the same
  bits in either tile, `wide_tiles_agree`),
  keys padded to a multiple of `SHARED_BLOCK` (512, so the kernel's key blocks are always
  exactly 512, aligned to a place fixed by the group), or a short prefix segment to one block of
  `segment_width` (64, 128 or 256, fixed by the segment's length alone: a base's prompt after
  the shared start, a stem). Every GEMM is [16, D] x [D, W] or [16, W] x [W, D], W fixed by the
  keys' length;
- **a prefix chunk's run** (a prompt's own tokens against the run before them): blocks of
  `PREFIX_BLOCK` positions aligned to the run's position 0, each one call of its g *
  PREFIX_BLOCK folded query rows against the keys it can reach (`prefix_block_attention`), so
  that every shape of the call, and a row's place in it, is fixed by the block's position
  alone, whatever the chunking or the rest of the step (`cpu_attention.prefix_chunk`). These rows
  are never compared with a row token's (which merges two key sets), only with themselves in
  another chunking, so their blocks need not be the row tokens' 16-row tiles: a block reads
  only the keys before its end, as a causal kernel would, instead of whole 512-key blocks;
- **a row's own keys** (each token of a row against its row's gathered slots): one token's g
  query heads per (batch, head) item, so M = g, fixed by the model; a token at row slot s
  against the first ceil((s + 1) / OWN_BLOCK) * OWN_BLOCK keys of its row in one call, the rows
  of a step grouped by that width (`step_layout._by_key_width`), so the kernel's key blocks
  (min(512, keys), then 512s) are set by the token's slot alone. A decode token and the same
  token inside a prefill chunk of any width run the same GEMMs. Where a check on the machine
  finds the same bits (`packing_agrees`), a prefill chunk's tokens of one row share an item
  instead, up to OWN_QUERY_ROWS query rows (`own_tokens_per_item`): the kernel's per-item work
  is most of this part's cost, and the check makes the cheaper call a way of computing the same bits, never a change of them.

Padding is exact: a padded or hidden key gets the dtype's lowest finite bias, so its weight
exp(s - max) is exactly 0 and a block that is all hidden leaves the running sums unchanged (its
rescale factor is exactly 1), or, if it comes first, is multiplied away by an exact 0; padded key
and value rows are zeros. What is left to the library is a row's position inside a 16-row tile
of a fixed-shape GEMM, which `engine/invariant/needle.py` checks on the machine before the
runner relies on it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nudgeability.engine.invariant.cpu.cores import CORES
from nudgeability.engine.invariant.cpu.weights import TILE_ROWS
from nudgeability.engine.scheduling.step_layout import KEY_ALIGN

QUERY_TILE = TILE_ROWS
SHARED_BLOCK = 512
# Query rows per tile of a shared-keys call with many rows, where `wide_tiles_agree`: cheaper
# per row than QUERY_TILE; from WIDE_FROM rows, under which whole wide tiles pad more.
WIDE_TILE = 32
WIDE_FROM = 128
PREFIX_BLOCK = 64  # positions per call of a prefix chunk (`prefix_block_attention`)
SEGMENT_WIDTHS = (64, 128, 256)  # a short prefix segment's one key block (`segment_width`)
# a row's own keys come in whole blocks of this many, the unit the step layout pads and groups
# them by (its one owner: `step_layout.KEY_ALIGN`)
OWN_BLOCK = KEY_ALIGN
# Query rows of one packed own-keys item: under the kernel's 192-row threshold, so its query
# blocks are 32 rows and a row's tokens are cut evenly into items of at most this many rows.
OWN_QUERY_ROWS = 128
# The most bytes a packed own-keys bias may take: it holds each token's row once per query head
# (g times the per-token bias, one copy per kv head), so a long prompt of a wide model would
# otherwise build hundreds of MiB; over it the rows keep
# one token per item, which gives the same bits.
PACKED_BIAS_BYTES = 64 << 20
LANES = 32  # fp32 elements per iteration of ATen's vectorised CPU loops (2 x 16, AVX-512)

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def lowest(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).min


def pad_keys(keys: torch.Tensor, block: int) -> torch.Tensor:
    """[kv, S, D] zero-padded along S to a multiple of `block`."""
    s = keys.shape[1]
    return F.pad(keys, (0, 0, 0, -(-s // block) * block - s))


def segment_width(keys: int) -> int:
    """The keys a prefix segment of `keys` keys is padded to, fixed by its length alone: the
    first of SEGMENT_WIDTHS that holds it (one key block of that width: a 40-token segment does
    not pay for 512 keys), else whole SHARED_BLOCKs."""
    for width in SEGMENT_WIDTHS:
        if keys <= width:
            return width
    return -(-keys // SHARED_BLOCK) * SHARED_BLOCK


def shared_keys_attention(
    folded: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    bias: torch.Tensor | None,
    scaling: float,
    tile: int | None = None,
):
    """Queries `folded` [kv, R, D] against keys/values [kv, S, D] (S a multiple of SHARED_BLOCK,
    or one of SEGMENT_WIDTHS)
    that every query shares, with an additive `bias` [1, T, QUERY_TILE, S] over the tiles, or
    [1, 1, 1, S] for all (None: every key visible). Returns o [kv, R, D] and the fp32
    log-sum-exp [kv, R].

    `tile`: query rows per tile; None: `query_tile`'s choice (WIDE_TILE for many rows where the
    machine gives a row the same bits in either tile, else QUERY_TILE)."""
    kv, r, d = folded.shape
    s = keys.shape[1]
    assert s % SHARED_BLOCK == 0 or s in SEGMENT_WIDTHS, s
    if tile is None:
        tile = query_tile(r, s, d, folded.dtype, bias)
    total = -(-r // tile) * tile
    q = F.pad(folded, (0, 0, 0, total - r)).view(kv, total // tile, tile, d)
    tiles = q.shape[1]
    k = keys[:, None].expand(kv, tiles, s, d)
    v = values[:, None].expand(kv, tiles, s, d)
    spans = CORES.spans(tiles)
    if len(spans) == 1:
        out, lse = _flash(q, k, v, 0.0, False, attn_mask=bias, scale=scaling)[:2]
    else:  # the tiles are the call's heads: each core takes whole ones (engine/invariant/cpu/cores.Cores)
        parts: list = [None] * len(spans)

        def job(i: int, a: int, b: int):
            mask = bias if bias is None or bias.shape[1] == 1 else bias[:, a:b]
            return lambda: parts.__setitem__(
                i,
                _flash(q[:, a:b], k[:, a:b], v[:, a:b], 0.0, False, attn_mask=mask, scale=scaling)[
                    :2
                ],
            )

        CORES.run([job(i, a, b) for i, (a, b) in enumerate(spans)])
        out = torch.cat([o for o, _ in parts], dim=1)
        lse = torch.cat([x for _, x in parts], dim=1)
    out = out.reshape(kv, total, d)[:, :r]
    lse = lse.reshape(kv, total)[:, :r]
    return out, lse


def query_tile(rows: int, keys: int, d: int, dtype: torch.dtype, bias) -> int:
    """The query tile of a shared-keys call of `rows` folded rows: WIDE_TILE from WIDE_FROM rows
    (under that its padding costs more than its tiles save) where `wide_tiles_agree`, and never
    under a per-tile bias (a sliding layer's, laid out in QUERY_TILE rows); else QUERY_TILE."""
    if rows < WIDE_FROM or (bias is not None and bias.shape[1] > 1):
        return QUERY_TILE
    return WIDE_TILE if wide_tiles_agree(keys, d, dtype, bias is not None) else QUERY_TILE


_WIDE: dict[tuple, bool] = {}


def wide_tiles_agree(keys: int, d: int, dtype: torch.dtype, masked: bool) -> bool:
    """Whether a WIDE_TILE-row tile gives every query row the very bits a QUERY_TILE-row tile
    gives it against `keys` shared keys (the kernel's GEMMs are set by the tile, keys, D, dtype,
    the mask's presence and the thread count), measured once per key and kept: rows drawn at
    random through wide tiles, against the same rows shuffled into narrow ones. Where it does
    not hold the calls keep QUERY_TILE, so that no record depends on the answer (as
    `cpu/products.blocks_agree` does for the products)."""
    key = (keys, d, dtype, masked, torch.get_num_threads())
    agrees = _WIDE.get(key)
    if agrees is None:
        gen = torch.Generator().manual_seed(0)
        rows = 4 * WIDE_TILE

        def randn(*shape):
            return torch.randn(*shape, generator=gen).to(dtype)

        folded, k, v = randn(1, rows, d), randn(1, keys, d), randn(1, keys, d)
        bias = None
        if masked:  # the last third of the keys hidden, as padding past a segment is
            real = torch.arange(keys) < keys - keys // 3
            bias = torch.where(real, 0.0, lowest(dtype)).to(dtype).view(1, 1, 1, keys)
        order = torch.randperm(rows, generator=gen)
        with torch.no_grad():
            wide = shared_keys_attention(folded, k, v, bias, d**-0.5, WIDE_TILE)
            narrow = shared_keys_attention(folded[:, order], k, v, bias, d**-0.5, QUERY_TILE)
        agrees = _WIDE[key] = all(torch.equal(w[:, order], n) for w, n in zip(wide, narrow))
    return agrees


def prefix_block_attention(
    block_q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    bias: torch.Tensor,
    scaling: float,
) -> torch.Tensor:
    """One block of a prefix chunk: folded query rows [kv, g * PREFIX_BLOCK, D] against the
    keys/values [kv, S, D] it reads, under the additive `bias` [1, 1, g * PREFIX_BLOCK, S]
    (which may be a column slice of a wider pattern). Returns o [kv, g * PREFIX_BLOCK, D].

    One kernel call: the kernel cuts the rows into query blocks by their count (fixed by g) and
    the keys into blocks of min(512, S) from the first (S fixed by the block's position), so the
    call's every GEMM is fixed by the block's position."""
    return _flash(
        block_q[None], keys[None], values[None], 0.0, False, attn_mask=bias, scale=scaling
    )[0][0]


def own_keys_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    bias: torch.Tensor,
    scaling: float,
    tokens: int = 1,
):
    """Each token of each row against its own row's keys: q [n, width, g, D], keys/values
    [n, 1, hw, D] (hw a multiple of OWN_BLOCK), where n counts (kv head, row) pairs in any order
    (the caller's layout: kv-major, so that keys gathered from the pool are already in it).
    Returns o [n, width, g, D] and the fp32 lse [n, width, g].

    `tokens` = 1: one token's g query heads per kernel item, under the additive `bias`
    [n, width, 1, hw]. `tokens` > 1 (`own_tokens_per_item`, only where `packing_agrees`): the
    row's tokens padded to whole items of `tokens` tokens, each item `tokens * g` query rows
    under `bias` [n, items, tokens * g, hw] (`pack_bias`); the padding's outputs are dropped.

    One call over all hw keys: the kernel's blocks are then set by (g, hw), and the caller gives
    every token the hw its own slot sets (`step_layout._by_key_width`), whatever else shares the
    call."""
    n, width, g, d = q.shape
    hw = keys.shape[2]
    assert hw % OWN_BLOCK == 0, hw
    items = -(-width // tokens)
    if tokens > 1:
        q = F.pad(q, (0, 0, 0, 0, 0, items * tokens - width)).reshape(n, items, tokens * g, d)
    heads = items if tokens > 1 else width
    o, lse = _flash(
        q,
        keys.expand(n, heads, hw, d),
        values.expand(n, heads, hw, d),
        0.0,
        False,
        attn_mask=bias,
        scale=scaling,
    )[:2]
    if tokens == 1:
        return o, lse
    o = o.reshape(n, items * tokens, g, d)[:, :width]
    return o, lse.reshape(n, items * tokens, g)[:, :width]


def own_tokens_per_item(width: int, g: int) -> int:
    """Tokens of one row per packed own-keys item for a prefill part of `width` tokens a row:
    the row cut evenly into the fewest items of at most OWN_QUERY_ROWS query rows (1 when a
    token's heads alone fill an item, or for a decode step)."""
    most = max(1, OWN_QUERY_ROWS // g)
    if width == 1 or most == 1:
        return 1
    return -(-width // -(-width // most))


def packed_bias_bytes(pairs: int, width: int, tokens: int, g: int, hw: int, dtype) -> int:
    """Bytes of `pack_bias`'s result for `pairs` (kv head, row) pairs of `width` tokens."""
    items = -(-width // tokens)
    return pairs * items * tokens * g * hw * torch.empty((), dtype=dtype).element_size()


_PACKING: dict[tuple, bool] = {}


def packing_agrees(tokens: int, g: int, hw: int, d: int, dtype: torch.dtype) -> bool:
    """Whether items of `tokens` tokens give every query row the very bits of one token per item
    (kernel shapes set by (tokens, g, hw, D, dtype) and the thread count), measured once per key
    and kept: random rows under a random causal bias through both calls. Where it does not hold
    the own keys stay one token per item, so that no record depends on the answer. As with
    `cpu/products.blocks_agree`, the answer is the kernel's, chosen by shapes, not values."""
    key = (tokens, g, hw, d, dtype, torch.get_num_threads())
    agrees = _PACKING.get(key)
    if agrees is None:
        gen = torch.Generator().manual_seed(0)
        n, width = 2, 2 * tokens - 1  # two rows, the second item of each one token short

        def randn(*shape):
            return torch.randn(*shape, generator=gen).to(dtype)

        q, k, v = randn(n, width, g, d), randn(n, 1, hw, d), randn(n, 1, hw, d)
        first = torch.randint(0, hw - width + 1, (n, 1), generator=gen)
        visible = torch.arange(hw)[None, None, :] <= (first + torch.arange(width))[:, :, None]
        bias = torch.where(visible, 0.0, lowest(dtype)).to(dtype)[:, :, None]
        with torch.no_grad():
            one = own_keys_attention(q, k, v, bias, d**-0.5)
            packed = own_keys_attention(q, k, v, pack_bias(bias, tokens, g), d**-0.5, tokens)
        agrees = _PACKING[key] = all(torch.equal(a, b) for a, b in zip(one, packed))
    return agrees


def pack_bias(bias: torch.Tensor, tokens: int, g: int) -> torch.Tensor:
    """A per-token own-keys `bias` [n, width, 1, hw] laid out for items of `tokens` tokens:
    [n, items, tokens * g, hw], each token's row repeated for its g heads; the padding tokens
    see every key (their outputs are dropped)."""
    n, width, _, hw = bias.shape
    items = -(-width // tokens)
    padded = F.pad(bias, (0, 0, 0, 0, 0, items * tokens - width))
    return padded.expand(n, items * tokens, g, hw).reshape(n, items, tokens * g, hw)


def merge(o_a, lse_a, o_b, lse_b, with_lse: bool = False):
    """Softmax over two key sets from each one's output and log-sum-exp: a convex mix of the two
    outputs weighted by their mass; fp32 mixing, rounded once. Also the merged log-sum-exp when
    `with_lse`. A side that saw no key (lse near the lowest value) gets weight exactly 0, and
    `lerp` returns the other side exactly."""
    weight = per_row(torch.sigmoid, lse_b - lse_a).unsqueeze(-1)
    if o_a.dtype != torch.float32:
        out = torch.lerp(o_a.float(), o_b.float(), weight).to(o_a.dtype)
    else:
        out = torch.lerp(o_a, o_b, weight)
    if not with_lse:
        return out, None
    # logaddexp as max + log1p(exp(-|a - b|)): exact when one side is a hidden segment's
    # near-lowest value (a + (b - a) would cancel catastrophically)
    gap = per_row(torch.exp, -(lse_a - lse_b).abs())
    return out, torch.maximum(lse_a, lse_b) + per_row(torch.log1p, gap)


def per_row(fn, x: torch.Tensor) -> torch.Tensor:
    """`fn(x)` elementwise, with each row (first dim) of `x` laid out on whole iterations of the
    vector loop: ATen computes a tensor's last elements with a scalar loop whose transcendentals
    can differ from the vector code in the last bit, so where a row's elements fall must not
    depend on how many rows there are (engine/README.md, batch invariance)."""
    n = x.shape[0]
    flat = x.reshape(n, -1)
    width = flat.shape[1]
    padded = F.pad(flat, (0, -(-width // LANES) * LANES - width))
    return fn(padded)[:, :width].view(x.shape)
