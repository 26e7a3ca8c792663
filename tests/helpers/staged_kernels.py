"""The staged numba kernels of the bootstrap (draw, then sum), kept out of the library.

The library runs the fused kernel `nudgeability.stats.resampling.kernels.resample_sums` (draws
counted per type, then summed) and its numpy twin; these numba stages are the tests' second route
to the same numbers: the plain draw is checked against its numpy twin, and the fused kernel
against the chain of the two.
"""

from __future__ import annotations

import numba
import numpy as np

from nudgeability.stats.resampling.kernels import _LOW32, _SHIFT32, _scale, _word


@numba.njit(parallel=True, cache=True)
def draw_indices(n_units, n_boot, key):
    """Resample indices (n_boot, n_units) int64 for stream `key` (see seed_key)."""
    out = np.empty((n_boot, n_units), dtype=np.int64)
    half = (n_units + 1) // 2
    for r in numba.prange(n_boot):
        for j in range(half):
            word = _word(key, r * half + j)
            out[r, 2 * j] = _scale(word >> _SHIFT32, n_units)
            if 2 * j + 1 < n_units:
                out[r, 2 * j + 1] = _scale(word & _LOW32, n_units)
    return out


@numba.njit(parallel=True, cache=True)
def sums_from_indices(contrib, indices):
    """Column sums of the resampled rows: out[r] = sum_j contrib[indices[r, j]]; int64."""
    n_boot, n_cols = indices.shape[0], contrib.shape[1]
    out = np.zeros((n_boot, n_cols), dtype=np.int64)
    for r in numba.prange(n_boot):
        for j in range(indices.shape[1]):
            row = indices[r, j]
            for c in range(n_cols):
                out[r, c] += contrib[row, c]
    return out
