"""What the batch-invariant GEMM tests share (tests/engine/invariant/cuda/): a Triton-interpreter
dot that behaves as a GPU's MMA does, inputs whose bits show any change of summation order, and
the one assertion the construction must pass and its negative controls must fail.

The interpreter's `tl.dot` is numpy's matmul (`InterpreterBuilder.create_dot` in
triton/runtime/interpreter.py, Triton 3.9), so a row's bits there are whatever numpy's BLAS does
with the tile, which is neither the question nor a GPU. `shape_dependent_dot` replaces it, for
one test only (monkeypatch), by a dot whose every output element is computed alone, k ascending
in float64, and rounded to the accumulator's fp32 once per chunk of K, the chunk's length set by
the tile's rows (BLOCK_M / 4): as a GPU's result depends on the MMA instruction the tile's shape
chooses and never on which lane a row sits in. A kernel whose tile follows the batch then gives
a row other bits, as it would on a GPU; one whose tile is fixed gives the same.
"""

from __future__ import annotations

import numpy as np
import torch

# the batch sizes a row is tried among (the sweep: every threshold of a 16-, 32- or
# 64-row tile, and 2 to 8 row tiles)
SWEEP = (1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 257, 511)


def shape_dependent_dot(monkeypatch) -> None:
    """Patch the interpreter's dot for the calling test (module docstring)."""
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        a64, b64 = a.data.astype(np.float64), b.data.astype(np.float64)
        acc = d.data.astype(np.float32)
        chunk = max(1, a64.shape[0] // 4)
        for c0 in range(0, a64.shape[1], chunk):
            part = np.zeros(acc.shape, dtype=np.float64)
            for k in range(c0, min(c0 + chunk, a64.shape[1])):
                part += a64[:, k, None] * b64[None, k, :]
            acc = (acc.astype(np.float64) + part).astype(np.float32)
        return TensorHandle(acc.astype(d.data.dtype), d.dtype.scalar)

    monkeypatch.setattr(InterpreterBuilder, "create_dot", create_dot)


def spread(rows: int, width: int, seed: int, dtype=torch.float32) -> torch.Tensor:
    """Activations whose elements span many binades (2^-8 .. 2^8 times a normal draw), so that
    summing a row's products in any other order, or rounding them at other points, changes its
    fp32 sum's bits."""
    gen = torch.Generator().manual_seed(seed)
    scale = 2.0 ** torch.randint(-8, 9, (rows, width), generator=gen).float()
    return (torch.randn(rows, width, generator=gen) * scale).to(dtype)


def assert_rows_alone(run, width: int, sizes=SWEEP, dtype=torch.float32, seed: int = 0) -> None:
    """For each M in `sizes`: one row r, computed alone (`run(x)` for x [1, K] -> [1, N]), is
    bitwise the row computed among M - 1 others, at every position tried (the first, a middle
    one at an odd offset in its 64-row tile, the last), all copies in one call."""
    row = spread(1, width, seed, dtype)
    alone = run(row)
    for m in sizes:
        positions = sorted({0, m // 2 + (m > 2), m - 1})
        x = spread(m, width, seed + m, dtype)
        x[positions] = row
        y = run(x)
        for p in positions:
            assert torch.equal(y[p : p + 1], alone), f"row {p} of {m} differs from its run alone"
