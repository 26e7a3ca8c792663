"""The paged kernel for row tokens (engine/invariant/cuda/paged_attention.py) under Triton's
interpreter, its `tl.dot` a k-ascending chain (tests/engine/invariant/cuda/conftest.py): a token's bits alone
and among others, in a prefill chunk, under other physical blocks, with a stem copied or viewed,
against a float64 softmax written here; and the negative controls (a split chosen from the batch,
keys visited in physical block order), which fail the very assertion the kernel passes.

The pool is `[KV, slots, D]` of random keys and values; the group's prefix is two segments (a
run of RUN tokens, then a stem of STEM) at contiguous slots; each row owns blocks anywhere else,
listed in logical order. `attend(scene, tokens)` runs one step: `tokens` are (row, slot) pairs
in step order, a row's consecutive pairs one prefill chunk, its own queries fixed per (row,
slot), so the same token gets the same query in every step.
"""

from __future__ import annotations

import pytest
import torch

from nudgeability.engine.invariant.cuda.paged_attention import (
    chunk_attention,
    row_attention,
    tile_tokens,
)
from nudgeability.engine.invariant.cuda.paged_tables import (
    TableBuilder,
    decode_buffers,
    decode_parts,
)

pytestmark = pytest.mark.usefixtures("ordered_dot")

KV, G, D, BS = 1, 4, 16, 16
H = KV * G
SPLIT, BLOCK_N = 32, 16  # small, so that a few hundred keys cross several splits
RUN, STEM = 70, 21
RUN_AT, STEM_AT = 16, 100  # pool slots of the two prefix segments (blocks 1-5 and 6-7)
PREFIX = RUN + STEM
SPARE = 8 * BS  # blocks 8-15: free contiguous slots for a stem's copy and a trunk
FIRST_FREE = 16  # rows' blocks come from here on
BLOCKS = 96
ROW_SLOTS = 48  # 3 blocks a row


class Scene:
    """The pool, the prefix segments and every row's blocks (module docstring)."""

    def __init__(self, dtype, rows=20, seed=0, spread=False, heads=(KV, G, D)):
        gen = torch.Generator().manual_seed(seed)
        self.dtype = dtype
        self.kv, self.g, self.d = kv, g, d = heads
        shape = (kv, BLOCKS * BS, d)
        self.k = torch.randn(shape, generator=gen).to(dtype)
        self.v = torch.randn(shape, generator=gen)
        if spread:  # values over many binades: any change of summation order shows in the bits
            self.v = self.v * 2.0 ** torch.randint(-6, 7, shape, generator=gen)
        self.v = self.v.to(dtype)
        self.q = torch.randn(rows, ROW_SLOTS, kv * g, d, generator=gen).to(dtype)
        ids = FIRST_FREE + torch.randperm(BLOCKS - FIRST_FREE, generator=gen)
        per = ROW_SLOTS // BS
        self.blocks = [[int(b) * BS for b in ids[r * per : (r + 1) * per]] for r in range(rows)]
        self.segments = ((RUN_AT, RUN, 0), (STEM_AT, STEM, RUN))
        self.gen = gen

    def move_row(self, row: int, new_blocks: list[int]) -> None:
        """Row `row`'s K/V copied to `new_blocks` (first slots), which it then owns: a
        recompute after a preemption writes the same values to other blocks."""
        for old, new in zip(self.blocks[row], new_blocks):
            self.k[:, new : new + BS] = self.k[:, old : old + BS]
            self.v[:, new : new + BS] = self.v[:, old : old + BS]
        self.blocks[row] = list(new_blocks)

    def scribble(self, row: int, after: int) -> None:
        """Fresh random K/V in row `row`'s slots after `after`: keys no query up to `after` sees."""
        for s in range(after + 1, ROW_SLOTS):
            slot = self.blocks[row][s // BS] + s % BS
            self.k[:, slot] = torch.randn(self.kv, self.d, generator=self.gen).to(self.dtype)
            self.v[:, slot] = torch.randn(self.kv, self.d, generator=self.gen).to(self.dtype)


def chunks(tokens: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """(first step index, row, s0, s1) of each run of consecutive slots of one row."""
    out = []
    for i, (row, slot) in enumerate(tokens):
        if out and out[-1][1] == row and out[-1][3] == slot:
            first, _, s0, _ = out[-1]
            out[-1] = (first, row, s0, slot + 1)
        else:
            out.append((i, row, slot, slot + 1))
    return out


def attend(scene: Scene, tokens, segments=None, split=SPLIT, window=None, order=list):
    """One step of row tokens (module docstring): {(row, slot): output [H, D]}. `order`: how
    a row's block table lists its blocks (the kernel's contract: logical order)."""
    builder = TableBuilder(tile_tokens(scene.g), BS)
    builder.group(0, len(tokens), scene.segments if segments is None else segments)
    for first, row, s0, s1 in chunks(tokens):
        builder.row(first, s0, s1, PREFIX, blocks=order(scene.blocks[row]))
    tables = builder.tensors("cpu")
    q = torch.stack([scene.q[row, slot] for row, slot in tokens])
    positions = torch.tensor([PREFIX + slot for _, slot in tokens])
    out = row_attention(
        q, scene.k, scene.v, positions, tables, scene.d**-0.5, window, split=split, block_n=BLOCK_N
    )
    return {token: out[i] for i, token in enumerate(tokens)}


def reference(scene: Scene, row: int, slot: int, window=None) -> torch.Tensor:
    """Float64 brute-force softmax of token (row, slot) over the keys it sees: [H, D]."""
    slots = list(range(RUN_AT, RUN_AT + RUN)) + list(range(STEM_AT, STEM_AT + STEM))
    slots += [scene.blocks[row][s // BS] + s % BS for s in range(slot + 1)]
    positions = torch.arange(len(slots))
    if window is not None:
        keep = (PREFIX + slot - positions) < window
        slots = [s for s, k in zip(slots, keep) if k]
    index = torch.tensor(slots)
    k, v = scene.k[:, index].double(), scene.v[:, index].double()
    q = scene.q[row, slot].view(scene.kv, scene.g, scene.d).double()
    weights = torch.softmax(q @ k.transpose(1, 2) * scene.d**-0.5, dim=-1)
    return (weights @ v).reshape(scene.kv * scene.g, scene.d)


def assert_same_bits(a: torch.Tensor, b: torch.Tensor) -> None:
    """The assertion every invariance test and its negative control share."""
    assert torch.equal(a, b), f"{(a.float() != b.float()).sum().item()} elements differ"


DTYPES = (torch.float32, torch.float16)
TARGET = (0, 37)  # row 0's slot 37: its own keys cross a split (32) and two blocks (16)


# (others, the target's place among them): tiles of 4 tokens (4 query heads each), the target
# at each place of a tile, in one tile, a full one, two, five
PLACES = [(1, 0), (1, 1), (3, 1), (3, 3), (4, 2), (4, 4), (5, 3), (16, 7), (17, 17)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("others, place", PLACES)
def test_alone_equals_among_others(dtype, others, place):
    """A decode token alone, then among `others` arms of its group at `place`."""
    scene = Scene(dtype)
    alone = attend(scene, [TARGET])[TARGET]
    arms = [(r, 5 + 2 * r) for r in range(1, others + 1)]
    step = arms[:place] + [TARGET] + arms[place:]
    assert_same_bits(attend(scene, step)[TARGET], alone)


@pytest.mark.parametrize("dtype", DTYPES)
def test_arms_finishing_mid_step(dtype):
    """Six arms decode; three finish; the others' next step gives each the bits it has alone."""
    scene = Scene(dtype)
    six = attend(scene, [(r, 20) for r in range(6)])
    three = attend(scene, [(r, 20) for r in (0, 2, 4)])
    for r in (0, 2, 4):
        assert_same_bits(three[(r, 20)], six[(r, 20)])
        assert_same_bits(three[(r, 20)], attend(scene, [(r, 20)])[(r, 20)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width, place", [(2, 1), (4, 0), (5, 4), (9, 3), (17, 9)])
def test_decode_equals_prefill_chunk(dtype, width, place):
    """The target inside a prefill chunk of `width` tokens of its row (at `place`), beside
    another arm's decode, against the target decoded alone with its row's later slots holding
    other values (a decode step has not written them)."""
    scene = Scene(dtype)
    row, slot = TARGET
    chunk = [(row, s) for s in range(slot - place, slot - place + width)]
    prefill = attend(scene, [(3, 11)] + chunk)[TARGET]
    scene.scribble(row, slot)
    assert_same_bits(attend(scene, [TARGET])[TARGET], prefill)


@pytest.mark.parametrize("dtype", DTYPES)
def test_permuted_physical_blocks(dtype):
    """The row's K/V moved to other physical blocks, in another physical order (a recompute
    after a preemption): the same bits, the blocks read in logical order through the table."""
    scene = Scene(dtype)
    before = attend(scene, [TARGET, (1, 30)])[TARGET]
    scene.move_row(0, scene.blocks[19][::-1])  # a row no step here uses
    assert_same_bits(attend(scene, [(1, 30), TARGET])[TARGET], before)


@pytest.mark.parametrize("dtype", DTYPES)
def test_stem_copied_recomputed_or_viewed(dtype):
    """The group's stem as computed in place, as a copy in other slots (not block-aligned), and
    as a view of a longer trunk's first STEM tokens (its later slots other values): the same
    segments by position, so the same bits for every token of the step."""
    scene = Scene(dtype)
    tokens = [TARGET, (2, 9), (2, 10)]
    base = attend(scene, tokens)
    copy_at, trunk_at = SPARE + 3, SPARE + 3 * BS
    for at in (copy_at, trunk_at):
        scene.k[:, at : at + STEM] = scene.k[:, STEM_AT : STEM_AT + STEM]
        scene.v[:, at : at + STEM] = scene.v[:, STEM_AT : STEM_AT + STEM]
    scene.k[:, trunk_at + STEM : trunk_at + 2 * STEM] = 7.0  # the trunk's later tokens
    scene.v[:, trunk_at + STEM : trunk_at + 2 * STEM] = -7.0
    for at in (copy_at, trunk_at):
        out = attend(scene, tokens, segments=((RUN_AT, RUN, 0), (at, STEM, RUN)))
        for token in tokens:
            assert_same_bits(out[token], base[token])


@pytest.mark.parametrize("dtype, bound", [(torch.float32, 2e-6), (torch.float16, 2e-3)])
@pytest.mark.parametrize("window", (None, 24, 60))
def test_against_float64(dtype, bound, window):
    """Tokens of a step against a float64 softmax over the keys each sees (windows hiding all
    of the prefix from some, part of it from others)."""
    scene = Scene(dtype)
    tokens = [(1, 0), TARGET, (0, 38), (2, 47), (3, 5)]
    out = attend(scene, tokens, window=window)
    for token in tokens:
        got = out[token].double()
        error = (got - reference(scene, *token, window)).abs().max().item()
        assert error <= bound, f"{token}: {error:.2e}"


@pytest.mark.parametrize("dtype, bound", [(torch.float32, 2e-6), (torch.float16, 2e-3)])
def test_odd_head_shapes(dtype, bound):
    """Two KV heads of 3 query heads of 24 (tiles of 5 tokens, 15 of 16 rows; a head padded to
    32): a token alone and among 6 others, bitwise, and against float64."""
    scene = Scene(dtype, heads=(2, 3, 24))
    alone = attend(scene, [TARGET])[TARGET]
    step = [(r, 3 * r) for r in range(1, 5)] + [TARGET, (5, 9), (6, 1)]
    assert_same_bits(attend(scene, step)[TARGET], alone)
    assert (alone.double() - reference(scene, *TARGET)).abs().max().item() <= bound


def flash_split(tokens: int) -> int:
    """A split as flash's split-KV heuristic chooses one: enough splits of the longest row's keys
    (128 here) to fill 132 SMs with the batch's programs, so fewer, longer splits for more rows."""
    splits = max(1, min(8, 132 // (tokens * KV)))
    return -(-128 // splits // BLOCK_N) * BLOCK_N


def alone_then_among_others(split_of) -> None:
    scene = Scene(torch.float32, spread=True)
    alone = attend(scene, [TARGET], split=split_of(1))[TARGET]
    step = [(r, 5 + 2 * r) for r in range(1, 17)] + [TARGET]
    assert_same_bits(attend(scene, step, split=split_of(len(step)))[TARGET], alone)


def test_fixed_split_passes():
    alone_then_among_others(lambda tokens: SPLIT)


def test_negative_control_split_from_the_batch():
    """The same check with the split chosen from the batch must fail it."""
    assert flash_split(1) != flash_split(17)
    with pytest.raises(AssertionError, match="elements differ"):
        alone_then_among_others(flash_split)


def preempted(order) -> None:
    """The last slot of row 0 (it sees all its blocks) before and after its K/V move to blocks
    whose physical order is the reverse of its first ones'."""
    scene = Scene(torch.float32, spread=True)
    token = (0, ROW_SLOTS - 1)
    before = attend(scene, [token], order=order)[token]
    spare = sorted(scene.blocks[19])
    ranks = sorted(range(3), key=lambda i: scene.blocks[0][i])
    moved = [0] * 3
    for rank, i in enumerate(ranks):
        moved[i] = spare[2 - rank]
    scene.move_row(0, moved)
    assert_same_bits(attend(scene, [token], order=order)[token], before)


def test_logical_order_passes():
    preempted(list)


def test_negative_control_physical_block_order():
    """Keys visited in physical block order (the table sorted by block id) must fail."""
    with pytest.raises(AssertionError, match="elements differ"):
        preempted(sorted)


@pytest.mark.parametrize("dtype, bound", [(torch.float32, 2e-6), (torch.float16, 2e-3)])
def test_prefix_chunks_fixed_splits(dtype, bound):
    """A prompt's own run computed in one chunk, two, or three (each beside another run's
    chunk): the same bits at every position (splits aligned to the run's start), and a float64
    causal softmax within `bound`."""
    scene = Scene(dtype)
    q = scene.q[:2, :35].reshape(RUN, H, D)  # a query per position of the run
    found = []
    for cuts in ((0, RUN), (0, 33, RUN), (0, 17, 40, RUN)):
        out = torch.empty(RUN, H, D, dtype=dtype)
        for c0, c1 in zip(cuts, cuts[1:]):
            builder = TableBuilder(tile_tokens(G), BS)
            builder.chunk(0, 3, STEM_AT, 3, 0)  # another run's first chunk in the step
            builder.chunk(3, 3 + c1 - c0, RUN_AT, c1, 0)
            positions = torch.cat([torch.arange(3), torch.arange(c0, c1)])
            queries = torch.cat([scene.q[5, :3], q[c0:c1]])
            got = chunk_attention(
                queries,
                scene.k,
                scene.v,
                positions,
                builder.tensors("cpu"),
                D**-0.5,
                split=SPLIT,
                block_n=BLOCK_N,
            )
            out[c0:c1] = got[3:]
        found.append(out)
    for other in found[1:]:
        assert_same_bits(other, found[0])
    k, v = scene.k[:, RUN_AT : RUN_AT + RUN].double(), scene.v[:, RUN_AT : RUN_AT + RUN].double()
    scores = q.double().view(RUN, KV, G, D).permute(1, 0, 2, 3) @ k.transpose(1, 2)[:, None]
    hidden = torch.arange(RUN)[None, :] > torch.arange(RUN)[:, None]
    scores = (scores * D**-0.5).masked_fill(hidden[None, :, None], float("-inf"))
    want = (torch.softmax(scores, -1) @ v[:, None]).permute(1, 0, 2, 3).reshape(RUN, H, D)
    assert (found[0].double() - want).abs().max().item() <= bound


@pytest.mark.parametrize("bucket", (16, 32))
def test_fixed_shape_decode_tables(bucket):
    """The fixed-shape decode's tables (paged_tables.decode_parts into a bucket's buffers, as
    StaticDecode.load writes them) give every decode row the bits of the eager tables, in a
    bucket of 16 rows and of 32."""
    scene = Scene(torch.float32)
    tokens = [(r, 4 + 3 * r) for r in range(1, 6)] + [TARGET]
    eager = attend(scene, tokens)
    run = ((RUN_AT, RUN_AT + RUN, 0), (STEM_AT, STEM_AT + STEM, RUN))
    rows = [(run, [b // BS for b in scene.blocks[r]], slot) for r, slot in tokens]
    tables = decode_buffers(bucket, tile_tokens(G), BLOCKS, BS, "cpu")
    tokens_p, sources_p, own_tokens, own_sources, blocks = decode_parts(
        rows, bucket, tile_tokens(G)
    )
    for buffer, part in zip(
        (tables.prefix_tokens, tables.prefix_sources, tables.own_tokens, tables.own_sources),
        (tokens_p, sources_p, own_tokens, own_sources),
    ):
        buffer.view(-1).copy_(torch.from_numpy(part))
    tables.tables[: len(rows), : blocks.size // len(rows)] = torch.from_numpy(blocks).view(
        len(rows), -1
    )
    q = torch.zeros(bucket, H, D)
    q[: len(tokens)] = torch.stack([scene.q[r, s] for r, s in tokens])
    positions = torch.zeros(bucket, dtype=torch.long)
    positions[: len(tokens)] = torch.tensor([PREFIX + s for _, s in tokens])
    out = row_attention(
        q, scene.k, scene.v, positions, tables, D**-0.5, split=SPLIT, block_n=BLOCK_N
    )
    for i, token in enumerate(tokens):
        assert_same_bits(out[i], eager[token])
