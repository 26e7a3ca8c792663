"""Paged attention for row tokens and prefix chunks whose bits depend on no batch: one Triton
kernel, its launcher, and what it computes.

**What a query sees.** A query token at absolute position `p` reads key *sources* in order: its
group's prefix segments (up to `MAX_SEGMENTS`, engine/attention/decode_layout.py; contiguous pool
slots read in place: a shared run, the rest of the prompt, a stem or a trunk view), then its own
row's keys (its blocks
through a per-row block table, in logical order, or a stem row's contiguous run). Key `i` of a
source sits at position `first + i`; the query sees it when `first + i <= p` and, on a sliding
layer, `p - (first + i) < window`.

**The order, fixed by the keys alone.** Each source is cut into splits of `split` keys aligned to
its own start (key 0 of the segment, or row slot 0), each split into blocks of `block_n` keys.
A split is an online softmax over its blocks (running max, sum and fp32 accumulator); it ends as
an output and a log-sum-exp, which are merged into the query's running result by `_merge` in
source order, then split order. A block or split with no key visible to a query row leaves that
row's state untouched (a `where`, not an addition of zeros), so the blocks a program visits
beyond a query's reach (its tile's other tokens see further) or before it (a window) change none
of its bits. What a query's bits then depend on: its own query, its sources' keys and values and
lengths up to its position, `split`, `block_n`, the head size and dtype, and the tile shape
(`BLOCK_Q` query rows: fixed by the GQA ratio alone), never which other tokens share its tile,
how many programs run, the SM count or the compute capability: the launch reads none of them.
It assumes what every batch-invariant GPU kernel assumes (engine/README.md): a row of a
fixed-shape `tl.dot` does not depend on the other rows of the tile. Triton's interpreter checks
the order (tests/engine/invariant/cuda/conftest.py), not a GPU's MMA bits: `benchmarks/gpu_check.py
--only paged` does that on a device (benchmarks/benchkit/gpu/paged.py).

**Tiles.** A program is one tile of `BLOCK_Q` query rows (`tokens` tokens x the GQA ratio `g`)
and one KV head. A prefix tile holds row tokens of one group, so a shared prefix is read once per
tile of the group's folded row tokens (16 / g of them), not once per arm (`paged_tables.py` cuts
the tiles, for the eager steps and in a bucket's buffers for the fixed-shape decode); an
own tile holds consecutive tokens of one row (a decode token alone; a prefill chunk's tokens
`tokens` at a time), and starts from its tokens' prefix result (`init`). A decoded token, the
same token inside a prefill chunk of any width, the same token recomputed after a preemption
(other physical blocks, the same logical order), a stem copied or recomputed and a trunk view of
the same length (the same segments: same starts, lengths and positions) therefore give the same
bits (tests/engine/invariant/cuda/test_paged_attention.py, test_paged_engine.py).

**The split and the scheduler's chunks.** Splits are aligned to each source's start in the pool,
not to the chunk a token is fed in: a prefill chunk reads its row's keys (its own chunk's
included, written before the attention) through the same table and the same splits as a later
decode of the same token. So the split need not divide the chunks the scheduler cuts row tokens
into (`min(2048, prefill_tokens)`, engine/scheduling/scheduler.py), and invariant mode need not
fix `prefill_tokens` for them; `SPLIT` = 512 divides 2,048 anyway, so a chunk of the default
size also starts on a split boundary, as SGLang's deterministic mode requires of its own kernel.
512 keys a split keeps the merges few (one per 512 keys) and the split's state in registers.

**Prefix chunks** (a prompt's own run, causal) run the same kernel with their run as the only
source and no `init` (`chunk_attention`, from shared_prefix_attention.step_attention): the
splits are aligned to the run's position 0, so a prompt token's bits depend on its position and
the run's keys before it, not on the chunk it is computed in nor on the batch (the fixed-split
causal variant).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

SPLIT = 512  # keys per split (module docstring)
BLOCK_N = 64  # keys per block of a split (divides SPLIT; each key's pool slot is looked up)
BLOCK_Q = 16  # query rows per tile (as static_decode.Q_TILE), for a GQA ratio up to 16


def tile_tokens(g: int) -> int:
    """Tokens per tile for a GQA ratio `g`: as many as BLOCK_Q query rows hold, at least one."""
    return max(1, BLOCK_Q // g)


def tile_rows(tokens: int, g: int) -> int:
    """Query rows of a tile of `tokens` tokens of `g` heads: BLOCK_Q, or the power of two that
    holds them (a model whose GQA ratio is over BLOCK_Q)."""
    return max(BLOCK_Q, triton.next_power_of_2(tokens * g))


@triton.jit
def _merge(o_run, lse_run, o_new, lse_new):
    """Softmax over the union of two key sets from each one's (output, lse); a side that saw no
    key (lse = -inf) leaves the other exactly as it was."""
    took = lse_new > float("-inf")
    first = lse_run == float("-inf")
    top = tl.maximum(lse_run, lse_new)
    top = tl.where(took & ~first, top, 0.0)
    w_run = tl.exp(lse_run - top)
    w_new = tl.exp(lse_new - top)
    total = tl.where(took & ~first, w_run + w_new, 1.0)
    mixed = (o_run * w_run[:, None] + o_new * w_new[:, None]) / total[:, None]
    o = tl.where(took[:, None], tl.where(first[:, None], o_new, mixed), o_run)
    lse = tl.where(took, tl.where(first, lse_new, top + tl.log(total)), lse_run)
    return o, lse


@triton.jit
def _paged_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    pos_ptr,
    tok_ptr,
    src_ptr,
    table_ptr,
    init_o_ptr,
    init_lse_ptr,
    out_ptr,
    lse_ptr,
    scale,
    window,
    heads,
    head_dim,
    stride_kh,
    stride_ks,
    stride_vh,
    stride_vs,
    table_width,
    G: tl.constexpr,
    TOKENS: tl.constexpr,
    ROWS: tl.constexpr,
    DP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr,
    NSEG: tl.constexpr,
    PAGE: tl.constexpr,
    HAS_INIT: tl.constexpr,
    WINDOWED: tl.constexpr,
    PRECISION: tl.constexpr,
):
    tile = tl.program_id(0)
    kvh = tl.program_id(1).to(tl.int64)  # a pool of over 2**31 elements: offsets in int64
    r = tl.arange(0, ROWS)
    which = r // G
    tok = tl.load(tok_ptr + tile * TOKENS + which, mask=which < TOKENS, other=-1)
    if tl.max(tok, 0) >= 0:  # a tile with no token (a bucket's unused one) does nothing
        live = tok >= 0
        tok = tl.where(live, tok, 0)
        row = tok * heads + kvh * G + r % G  # the query row in [tokens * heads]
        d = tl.arange(0, DP)
        dmask = d < head_dim
        q = tl.load(
            q_ptr + row[:, None] * head_dim + d[None, :],
            mask=live[:, None] & dmask[None, :],
            other=0.0,
        )
        qpos = tl.load(pos_ptr + tok, mask=live, other=-1)  # a dead row sees no key
        q_hi = tl.max(tl.where(live, qpos, -1), 0)
        q_lo = tl.min(tl.where(live, qpos, 2147483647), 0)
        if HAS_INIT:
            o_run = tl.load(
                init_o_ptr + row[:, None] * head_dim + d[None, :],
                mask=live[:, None] & dmask[None, :],
                other=0.0,
            )
            lse_run = tl.load(init_lse_ptr + row, mask=live, other=float("-inf"))
        else:
            o_run = tl.zeros([ROWS, DP], dtype=tl.float32)
            lse_run = tl.full([ROWS], float("-inf"), dtype=tl.float32)
        k_base = k_ptr + kvh * stride_kh
        v_base = v_ptr + kvh * stride_vh
        for j in tl.static_range(NSEG):
            at = src_ptr + (tile * NSEG + j) * 4
            table = tl.load(at)
            start = tl.load(at + 1)
            length = tl.load(at + 2)
            first = tl.load(at + 3)
            # keys past the tile's last query, or (windowed) before its first one's window, are seen
            # by no row: skipping them is exact (module docstring)
            hi = tl.minimum(length, q_hi - first + 1)
            lo = 0
            if WINDOWED:
                lo = tl.maximum(q_lo - window + 1 - first, 0)
            for s0 in range((lo // SPLIT) * SPLIT, hi, SPLIT):
                m = tl.full([ROWS], float("-inf"), dtype=tl.float32)
                mass = tl.zeros([ROWS], dtype=tl.float32)
                acc = tl.zeros([ROWS, DP], dtype=tl.float32)
                b_lo = tl.maximum(s0, (lo // BLOCK_N) * BLOCK_N)
                b_hi = tl.minimum(s0 + SPLIT, hi)
                for b0 in range(b_lo, b_hi, BLOCK_N):
                    i = b0 + tl.arange(0, BLOCK_N)
                    inside = i < length
                    logical = start + i
                    page = tl.load(
                        table_ptr + tl.maximum(table, 0) * table_width + logical // PAGE,
                        mask=inside & (i * 0 + table >= 0),
                        other=0,
                    )
                    slot = tl.where(table >= 0, page * PAGE + logical % PAGE, logical)
                    slot = tl.where(inside, slot, 0).to(tl.int64)
                    kv_mask = inside[:, None] & dmask[None, :]
                    k = tl.load(
                        k_base + slot[:, None] * stride_ks + d[None, :], mask=kv_mask, other=0.0
                    )
                    v = tl.load(
                        v_base + slot[:, None] * stride_vs + d[None, :], mask=kv_mask, other=0.0
                    )
                    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
                    kpos = first + i
                    seen = inside[None, :] & (kpos[None, :] <= qpos[:, None])
                    if WINDOWED:
                        seen = seen & (qpos[:, None] - kpos[None, :] < window)
                    s = tl.where(seen, s, float("-inf"))
                    top = tl.max(s, 1)
                    any_seen = top > float("-inf")
                    m_new = tl.where(any_seen, tl.maximum(m, top), m)
                    m_safe = tl.where(m_new > float("-inf"), m_new, 0.0)
                    alpha = tl.exp(m - m_safe)
                    p = tl.exp(s - m_safe[:, None])
                    pv = tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
                    mass = tl.where(any_seen, mass * alpha + tl.sum(p, 1), mass)
                    acc = tl.where(any_seen[:, None], acc * alpha[:, None] + pv, acc)
                    m = m_new
                saw = mass > 0
                o_split = acc / tl.where(saw, mass, 1.0)[:, None]
                lse_split = tl.where(saw, m + tl.log(tl.where(saw, mass, 1.0)), float("-inf"))
                o_run, lse_run = _merge(o_run, lse_run, o_split, lse_split)
        out_mask = live[:, None] & dmask[None, :]
        tl.store(
            out_ptr + row[:, None] * head_dim + d[None, :],
            o_run.to(out_ptr.dtype.element_ty),
            mask=out_mask,
        )
        tl.store(lse_ptr + row, lse_run, mask=live)


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor,
    tokens: torch.Tensor,
    sources: torch.Tensor,
    tables: torch.Tensor,
    scaling: float,
    window: int | None = None,
    init: tuple[torch.Tensor, torch.Tensor] | None = None,
    out_dtype: torch.dtype | None = None,
    split: int = SPLIT,
    block_n: int = BLOCK_N,
    page: int = 16,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each listed token of `q` against its tile's key sources; (output, fp32 lse).

    - `q` [N, H, D] (query head h reads KV head h // g, g = H / kv); `k`, `v` the pool's
      `[kv, slots, D]` (any slot stride); `positions` [N] each token's absolute position;
    - `tokens` [tiles, T]: the tokens of each tile (-1: an empty place); T is fixed by the model
      (`tile_tokens(g)`: with the head count it sets the tile's shape);
    - `sources` [tiles, S, 4]: per tile, S key sources in merge order, each (table row or
      paged_tables.NO_TABLE, first logical key, keys, position of key 0); a source of 0 keys is skipped. With a
      table row `t`, logical key `x` sits at pool slot `tables[t, x // page] * page + x % page`;
      without, at slot `x`;
    - `tables` [rows, width]: block ids (not slots), each row in logical order;
    - `init`: (output fp32 [N, H, D], lse [N, H]) to merge first (a token's prefix result);
    - `out_dtype`: the output's dtype (default q's; fp32 for a result merged again later).
    Tokens no tile lists are left as `torch.empty` made them. The launch reads shapes and the
    given constants only (module docstring)."""
    n, heads, d = q.shape
    kv = k.shape[0]
    g = heads // kv
    assert heads % kv == 0 and split % block_n == 0
    assert k.stride(2) == 1 and v.stride(2) == 1 and k.shape == v.shape
    q = q.contiguous()
    out = torch.empty(n, heads, d, dtype=out_dtype or q.dtype, device=q.device)
    lse = torch.empty(n, heads, dtype=torch.float32, device=q.device)
    tiles = tokens.shape[0]
    if tiles == 0 or n == 0:
        return out, lse
    init_o, init_lse = init if init is not None else (out, lse)
    if tables.numel() == 0:
        tables = torch.zeros(1, 1, dtype=torch.long, device=q.device)
    _paged_kernel[(tiles, kv)](
        q,
        k,
        v,
        positions,
        tokens.contiguous(),
        sources.contiguous(),
        tables.contiguous(),
        init_o.contiguous(),
        init_lse.contiguous(),
        out,
        lse,
        scaling,
        window or 0,
        heads,
        d,
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        tables.shape[1],
        G=g,
        TOKENS=tokens.shape[1],
        ROWS=tile_rows(tokens.shape[1], g),
        DP=max(16, triton.next_power_of_2(d)),  # tl.dot takes no side under 16
        BLOCK_N=block_n,
        SPLIT=split,
        NSEG=sources.shape[1],
        PAGE=page,
        HAS_INIT=init is not None,
        WINDOWED=window is not None,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )
    return out, lse


def row_attention(q, k, v, positions, tables, scaling, window=None, **sizes) -> torch.Tensor:
    """Row tokens `q` [n, H, D] at `positions` [n] against their prefix segments, then their own
    rows' keys, per `tables` (paged_tables.PagedTables): [n, H, D] in q's dtype. Two launches:
    the prefix tiles' fp32 result is the own tiles' `init`. `sizes`: `split`, `block_n` (tests)."""
    prefix = paged_attention(
        q,
        k,
        v,
        positions,
        tables.prefix_tokens,
        tables.prefix_sources,
        tables.tables,
        scaling,
        window,
        out_dtype=torch.float32,
        page=tables.page,
        **sizes,
    )
    out, _ = paged_attention(
        q,
        k,
        v,
        positions,
        tables.own_tokens,
        tables.own_sources,
        tables.tables,
        scaling,
        window,
        init=prefix,
        page=tables.page,
        **sizes,
    )
    return out


def static_decode_attention(q, handle, scaling, window=None) -> torch.Tensor:
    """The fixed-shape decode's rows (engine/attention/static_decode.py) on this kernel: q
    [1, H, rows, D] -> [1, rows, H, D], every table a buffer of the bucket (`StaticDecode.paged`),
    no host sync, so a CUDA graph replays it. Pad rows are in no tile (paged_tables.py): their
    output is zero (`row_key` < 0 marks them, decode_layout.py)."""
    layout = handle.layout
    rows = q[0].transpose(0, 1)
    out = row_attention(
        rows, handle.k, handle.v, layout.positions.view(-1), layout.paged, scaling, window
    )
    real = (layout.row_key >= 0)[:, None, None]
    return torch.where(real, out, torch.zeros((), dtype=out.dtype, device=out.device))[None]


def chunk_attention(q, k, v, positions, tables, scaling, window=None, **sizes) -> torch.Tensor:
    """A step's prefix-chunk tokens, `q` [T, H, D] at `positions` [T] (step-token indices; the
    chunk tiles list only theirs), causal over their runs: [T, H, D], other tokens unset."""
    out, _ = paged_attention(
        q,
        k,
        v,
        positions,
        tables.chunk_tokens,
        tables.chunk_sources,
        tables.tables,
        scaling,
        window,
        page=tables.page,
        **sizes,
    )
    return out
