"""The launch plan of every batch-invariant matrix product on CUDA: a function of the weight's
shape alone.

A row's output y[r] = x[r] @ W.T is summed by a Triton program over one [BLOCK_M, BLOCK_N] tile
in BLOCK_K slices (models/quant/triton_kernels.py). Its bits follow the tile's shape (which MMA
instructions the compiler emits, and how each accumulates over K) and the K split (where fp32
partial sums are rounded and in which order they are added), never the row's position in the
tile nor the other rows: those only fill other lanes of the same instructions. So if the tile
and the split are fixed by the weight, a row's bits are fixed whatever M is. `plan` reads the
weight's (N, K) and nothing else: not the rows, not the SM count, not the compute capability,
not the data. The one compile-time fact of the rows, Triton's specialisation of an integer
argument on its value (M == 1, M % 16 == 0), is switched off for M in every kernel there.

*BLOCK_M = 64, for every M.* It is the M of one Hopper warpgroup MMA (`wgmma` computes 64 rows
per instruction) and the largest row class of `triton_kernels.tile_for`, so no tile the kernels
did not already run. A decode bucket holds 16 to 512 rows: at 16 rows three quarters of the
tile is zeros, but a decode product is bound by reading the weight, which a row tile reads once
whatever its height, so the idle MMA lanes cost little; at 512 rows eight row tiles read each
weight tile, from L2 after the first. A prefill chunk of 2,048 rows runs 32 row tiles, where a
taller tile would read the weight fewer times; 128 would double the idle share of every decode
step of 16 to 64 rows, the step the campaign spends its time in.

*BLOCK_N and SPLIT_K* are `triton_kernels.columns(N, K)`, the rule the non-invariant tile
already used: 64 columns (128 for a layer wide enough to fill the GPU twice), and K cut into up
to 8 ranges where the column tiles alone would leave most of a GPU idle at decode. Each range
writes fp32 partial sums that are added in range order, then rounded once (`_launch`). The
"GPU" there is the constant `TARGET_PROGRAMS`, not the device's: a card with another SM count
computes the same splits. A split costs a prefill its fp32 workspace (split × M × N × 4 bytes),
paid so that the decode step, which sets the run's speed, keeps the GPU busy.
"""

from __future__ import annotations

from nudgeability.models.quant.triton_kernels import Tile, columns

BLOCK_M = 64


def plan(n_out: int, width: int) -> Tile:
    """The tile and K split of y = x @ W.T for a weight [n_out, width], whatever x's rows."""
    return Tile(BLOCK_M, *columns(n_out, width))
