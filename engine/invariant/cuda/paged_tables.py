"""The host side of the paged kernel's tables (paged_attention.py): a step's tiles, key sources
and block tables, as integer lists for the step's one host-to-device copy
(engine/scheduling/step_layout.py) and as the tensors the kernel reads.

Three kinds of tile, each `tokens` places (the model's `paged_attention.tile_tokens`), -1 where
empty:

- **prefix tiles**: the row tokens of one group, `tokens` at a time in step order, with the
  group's prefix segments as sources (up to MAX_SEGMENTS, contiguous slots, in position order):
  a shared prefix is read once per tile of its group's tokens. Every group gets its tiles, one
  with no segment too, so that every row token has a prefix result (lse -inf: none);
- **own tiles**: consecutive tokens of one row's chunk, `tokens` at a time, with the row's keys
  as the one source: its block table row (block ids in logical order) or, for a stem row, its
  run's contiguous slots; keys [0, s1) at positions from the group's prefix length;
- **chunk tiles**: consecutive tokens of a prefix chunk (step-token indices), with their run
  [0, c1) as the one source: the causal fixed-split variant.

The fixed-shape decode (engine/attention/static_decode.py) keeps the same tables in buffers of a
bucket's shape (`decode_buffers`), rewritten each step from `decode_parts`: real row i's own tile
is tile i; a pad row is in no tile (its output is zeroed after, `static_decode_attention`), and a
tile with no token does nothing, so a bucket's padding costs next to nothing.

Nothing here reads the batch to choose a shape: a tile's tokens are its group's or row's, its
sources its own, and `tokens` is the model's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from nudgeability.engine.sequence import MAX_SEGMENTS

NO_TABLE = -1  # a source read as contiguous pool slots (paged_attention.paged_attention)
_FIELDS = (
    "prefix_tokens",
    "prefix_sources",
    "own_tokens",
    "own_sources",
    "chunk_tokens",
    "chunk_sources",
    "tables",
)


@dataclass
class PagedTables:
    """The kernel's tables of one step (module docstring), on the device."""

    prefix_tokens: torch.Tensor  # [tiles, tokens] row-token indices
    prefix_sources: torch.Tensor  # [tiles, MAX_SEGMENTS, 4]
    own_tokens: torch.Tensor  # [tiles, tokens] row-token indices
    own_sources: torch.Tensor  # [tiles, 1, 4]
    chunk_tokens: torch.Tensor  # [tiles, tokens] step-token indices
    chunk_sources: torch.Tensor  # [tiles, 1, 4]
    tables: torch.Tensor  # [rows, width] block ids
    page: int  # the pool's block size


class TableBuilder:
    """Collects a step's tiles on the host (module docstring); `block_size` is the pool's."""

    def __init__(self, tokens: int, block_size: int):
        self.tokens, self.block_size = tokens, block_size
        self.lists: dict[str, list[int]] = {name: [] for name in _FIELDS}
        self.rows: list[list[int]] = []

    def _tiles(self, kind: str, first: int, count: int, sources: list[tuple]) -> None:
        per = 4 * len(sources)
        for a in range(first, first + count, self.tokens):
            b = min(first + count, a + self.tokens)
            self.lists[f"{kind}_tokens"] += list(range(a, b)) + [-1] * (self.tokens - (b - a))
            self.lists[f"{kind}_sources"] += [v for source in sources for v in source]
        assert len(self.lists[f"{kind}_sources"]) % per == 0

    def group(self, a0: int, a1: int, segments) -> None:
        """Row tokens [a0, a1) of a group whose prefix is `segments` (pool start, length, position
        of the first token), in position order."""
        sources = [(NO_TABLE, start, length, offset) for start, length, offset in segments]
        if len(sources) > MAX_SEGMENTS:
            raise ValueError(f"a group of {len(sources)} prefix segments; at most {MAX_SEGMENTS}")
        sources += [(NO_TABLE, 0, 0, 0)] * (MAX_SEGMENTS - len(sources))
        self._tiles("prefix", a0, a1 - a0, sources)

    def row(self, first: int, s0: int, s1: int, prefix_len: int, blocks=None, start=None) -> None:
        """Row slots [s0, s1) fed as row tokens from `first`: the row's keys are its `blocks`
        (first slots of its blocks, in logical order) or contiguous from pool slot `start`."""
        if blocks is not None:
            self.rows.append([slot // self.block_size for slot in blocks])
            source = (len(self.rows) - 1, 0, s1, prefix_len)
        else:
            source = (NO_TABLE, start, s1, prefix_len)
        self._tiles("own", first, s1 - s0, [source])

    def chunk(self, t0: int, t1: int, run_start: int, c1: int, run_offset: int) -> None:
        """Step tokens [t0, t1), positions run_offset + [c1 - (t1 - t0), c1) of a run at pool slot
        `run_start`: causal over the run's keys [0, c1)."""
        self._tiles("chunk", t0, t1 - t0, [(NO_TABLE, run_start, c1, run_offset)])

    def flat(self) -> dict[str, list[int]]:
        """Every table as one flat integer list (the block tables padded with block 0)."""
        width = max([1] + [len(r) for r in self.rows])
        out = dict(self.lists)
        out["tables"] = [b for r in self.rows for b in r + [0] * (width - len(r))]
        return out

    def shapes(self) -> dict[str, tuple[int, ...]]:
        width = max([1] + [len(r) for r in self.rows])
        t = self.tokens
        return {
            "prefix_tokens": (-1, t),
            "prefix_sources": (-1, MAX_SEGMENTS, 4),
            "own_tokens": (-1, t),
            "own_sources": (-1, 1, 4),
            "chunk_tokens": (-1, t),
            "chunk_sources": (-1, 1, 4),
            "tables": (len(self.rows), width),
        }

    def built(self, tensors: dict[str, torch.Tensor]) -> PagedTables:
        """The tables from their flat tensors (as `flat` laid them out, on the device)."""
        shapes = self.shapes()
        views = {name: tensors[name].view(shapes[name]) for name in _FIELDS}
        return PagedTables(**views, page=self.block_size)

    def tensors(self, device) -> PagedTables:
        """The tables on `device`, each its own copy (tests; the engine packs `flat`)."""
        flat = self.flat()
        return self.built(
            {n: torch.tensor(v, dtype=torch.long, device=device) for n, v in flat.items()}
        )


def of_plan(plan, spans, pieces, chunks, tokens: int, block_size: int) -> TableBuilder:
    """A step's builder: `spans` its `GroupSpan`s, `pieces` its row chunks as (first row token,
    row, s0, s1), `chunks` its `PrefixChunk`s, in the order of `plan.prefix_chunks`
    (step_layout.py)."""
    builder = TableBuilder(tokens, block_size)
    for span in spans:
        builder.group(span.a0, span.a1, span.segments)
    for first, row, s0, s1 in pieces:
        base = row.group.prefix_len
        if row.stem is not None:
            builder.row(first, s0, s1, base, start=row.stem.start)
        else:
            builder.row(first, s0, s1, base, blocks=row.blocks)
    for (group, _, _), chunk in zip(plan.prefix_chunks, chunks):
        builder.chunk(chunk.t0, chunk.t1, chunk.start, chunk.c1, group.own.offset)
    return builder


def decode_buffers(rows: int, tokens: int, blocks: int, block_size: int, device) -> PagedTables:
    """The paged tables of a fixed-shape decode bucket of `rows` rows over a pool of `blocks`
    blocks: the buffers `decode_parts` fills."""

    def zeros(*shape, dtype=torch.long):
        return torch.zeros(*shape, dtype=dtype, device=device)

    return PagedTables(
        prefix_tokens=zeros(rows, tokens),
        prefix_sources=zeros(rows, MAX_SEGMENTS, 4),
        own_tokens=zeros(rows, tokens),
        own_sources=zeros(rows, 1, 4),
        chunk_tokens=zeros(0, tokens),
        chunk_sources=zeros(0, 1, 4),
        tables=zeros(rows, blocks, dtype=torch.int32),  # a row's blocks, as kv_indices holds them
        page=block_size,
    )


def decode_parts(rows: list, bucket: int, tokens: int) -> list[np.ndarray]:
    """One decode step's paged tables for a bucket of `bucket` rows, as int64 arrays:
    prefix tiles [bucket, tokens], their sources [bucket, MAX_SEGMENTS, 4], the own tiles
    [bucket, tokens] and their sources [bucket, 1, 4], and the real rows' block tables
    [n, width] (width: the longest row's blocks). `rows`: per real row in step order (its group's segments as (start, end, position
    of the first token), its block ids in logical order, its slot); a group's rows adjacent."""
    n = len(rows)
    tok = np.full((bucket, tokens), -1, np.int64)
    src = np.zeros((bucket, MAX_SEGMENTS, 4), np.int64)
    src[..., 0] = NO_TABLE
    own_tok = np.full((bucket, tokens), -1, np.int64)
    own_tok[:n, 0] = np.arange(n)
    own = np.zeros((bucket, 1, 4), np.int64)
    own[..., 0] = NO_TABLE
    width = max([1] + [len(ids) for _, ids, _ in rows])
    tables = np.zeros((n, width), np.int64)
    tile, fill, current = -1, tokens, None
    for i, (segments, ids, slot) in enumerate(rows):
        if segments is not current or fill == tokens:
            tile, fill, current = tile + 1, 0, segments
            for j, (start, end, offset) in enumerate(segments):
                src[tile, j] = (NO_TABLE, start, end - start, offset)
        tok[tile, fill] = i
        fill += 1
        prefix_len = sum(end - start for start, end, _ in segments)
        own[i, 0] = (i, 0, slot + 1, prefix_len)
        tables[i, : len(ids)] = ids
    return [tok.ravel(), src.ravel(), own_tok.ravel(), own.ravel(), tables.ravel()]
