"""Numba kernels of the bootstrap and the random reference, each with a plain-numpy twin.

One resampling machinery, many statistics: a replicate draws n units with replacement, adds up
their contribution rows (`contributions.py`) and turns the sums into S, WT, WTrand and L. WTrand,
the matched random reference, is computed analytically in every replicate from the stratum
counts (sum F*K/N), so the random reference is resampled together with WT.

Randomness. Replicate r's draws are a pure function of (seed, r): SplitMix64 at stream position
r*ceil(n/2) + j yields a 64-bit word whose high and low 32-bit halves x give draws 2j and 2j+1 by
floor(x * n / 2**32) (non-uniform by a relative error below n / 2**32, 2.3e-7 at n = 1000: far
below the Monte Carlo error). Hence results depend on the seed only, never on the thread count or
on how replicates are split between threads, and the numpy twins reproduce the kernels bit for bit.

The fused kernel `bootstrap_statistics` has a twin `bootstrap_statistics_twin` taking the same
arguments, built from the staged twins below (draw the indices, sum the rows, evaluate the
statistics); given the same seed, both return identical arrays. The numba versions of the stages,
which the library never calls, live with the tests that check the fused kernel against them
(tests/helpers/staged_kernels.py). The grounded-nudge estimators (grounding.py) use two more:
`draw_counts` (the same stream's draws counted per unit, twin `draw_counts_twin`) and
`weighted_auroc` (AUROC per replicate, twin `signals.auroc_weighted`). The kernels are compiled
on first use and cached on disk.
"""

from __future__ import annotations

import numba
import numpy as np

from .contributions import (
    F_OFF,
    H_OFF,
    IN_S,
    K_OFF,
    N_OFF,
    STRATA_START,
    TOOL_MINUS,
    TOOL_PLUS,
    stratum_columns,
)
from .sensitivity import swing
from .targeting import targeting_from_counts

N_STATISTICS = 4  # S, WT, WTrand, L: the columns of every statistics array
STATISTICS = ("S", "WT", "WTrand", "L")
_N_STRATA = 4

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_LOW32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)
MAX_UNITS = 2**31 - 1
_BLOCK = 64  # replicates per parallel work item


def seed_key(seed: int) -> np.uint64:
    """The 64-bit stream key of an integer seed (SplitMix64's mixer applied to seed mod 2**64)."""
    return _mix_twin(np.asarray([int(seed) % 2**64], dtype=np.uint64))[0]


# ---------------------------------------------------------------- random indices


@numba.njit(inline="always", cache=True)
def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@numba.njit(inline="always", cache=True)
def _word(key, position):
    return _mix(key + (np.uint64(position) + np.uint64(1)) * _GOLDEN)


@numba.njit(inline="always", cache=True)
def _scale(half_word, n_units):
    return np.int64((half_word * np.uint64(n_units)) >> _SHIFT32)


def _mix_twin(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def draw_indices_twin(
    n_units: int, n_boot: int, key: np.uint64, first_replicate: int = 0
) -> np.ndarray:
    """Resample indices (n_boot, n_units) int64 for stream `key` (see seed_key); `first_replicate` lets callers draw in chunks."""
    half = (n_units + 1) // 2
    r = np.arange(first_replicate, first_replicate + n_boot, dtype=np.uint64)[:, None]
    position = r * np.uint64(half) + np.arange(half, dtype=np.uint64)[None, :]
    word = _mix_twin(np.uint64(key) + (position + np.uint64(1)) * _GOLDEN)
    halves = np.stack([word >> _SHIFT32, word & _LOW32], axis=-1).reshape(n_boot, 2 * half)[
        :, :n_units
    ]
    return ((halves * np.uint64(n_units)) >> _SHIFT32).astype(np.int64)


@numba.njit(parallel=True, cache=True)
def draw_counts(n_units, n_boot, key):
    """(n_boot, n_units) int32: how often replicate r draws each unit, for stream `key` (the
    draws of draw_indices_twin, counted). The grounded-nudge estimators weight rows by these."""
    out = np.zeros((n_boot, n_units), dtype=np.int32)
    half = (n_units + 1) // 2
    for r in numba.prange(n_boot):
        for j in range(half):
            word = _word(key, r * half + j)
            out[r, _scale(word >> _SHIFT32, n_units)] += 1
            if 2 * j + 1 < n_units:
                out[r, _scale(word & _LOW32, n_units)] += 1
    return out


def draw_counts_twin(n_units: int, n_boot: int, key: np.uint64) -> np.ndarray:
    """numpy twin of draw_counts: bincount of draw_indices_twin, replicate by replicate."""
    drawn = draw_indices_twin(n_units, n_boot, key)
    offsets = (np.arange(n_boot) * n_units)[:, None]
    counts = np.bincount((drawn + offsets).ravel(), minlength=n_boot * n_units)
    return counts.reshape(n_boot, n_units).astype(np.int32)


@numba.njit(parallel=True, cache=True)
def weighted_auroc(counts, unit, right, level_end):
    """AUROC per replicate (n_boot,) float64: rows, sorted by score, count counts[r, unit[row]]
    times; `right` (rows,) is 1 for s = 1 and 0 for s = 0; `level_end[l]` is one past the last
    row of the l-th run of equal scores. A right row beats the wrong rows of lower levels and
    ties with those of its own (Mann-Whitney); NaN without both classes. Every sum is of integers
    and halves, so the result is exact whatever the order: the twin (signals.auroc_weighted)
    gives the same floats."""
    n_boot = counts.shape[0]
    out = np.empty(n_boot, dtype=np.float64)
    for r in numba.prange(n_boot):
        below = 0.0
        n_right = 0.0
        won = 0.0
        start = 0
        for end in level_end:
            level_right = 0.0
            level_wrong = 0.0
            for row in range(start, end):
                w = counts[r, unit[row]]
                if right[row]:
                    level_right += w
                else:
                    level_wrong += w
            won += level_right * (below + 0.5 * level_wrong)
            below += level_wrong
            n_right += level_right
            start = end
        pairs = n_right * below
        out[r] = won / pairs if pairs > 0 else np.nan
    return out


# ---------------------------------------------------------------- sums and statistics


def sums_from_indices_twin(contrib: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Column sums of the resampled rows: out[r] = sum_j contrib[indices[r, j]]; int64 (exact)."""
    return contrib[indices].sum(axis=1, dtype=np.int64)


@numba.njit(inline="always", cache=True)
def _statistics_into(sums, out):
    # The same float operations, in the same order, as sensitivity.swing and
    # targeting.targeting_from_counts: this is what makes kernel and twin agree exactly.
    n_s = sums[IN_S]
    out[0] = 100.0 * (sums[TOOL_MINUS] / n_s - sums[TOOL_PLUS] / n_s) if n_s > 0 else np.nan
    f_total = 0
    h_total = 0
    expected = 0.0
    for j in range(_N_STRATA):
        col = STRATA_START + 4 * j
        n_j, f_j, k_j = sums[col + N_OFF], sums[col + F_OFF], sums[col + K_OFF]
        f_total += f_j
        h_total += sums[col + H_OFF]
        if n_j > 0:
            expected = expected + np.float64(f_j * k_j) / np.float64(n_j)
    if f_total > 0:
        out[1] = h_total / f_total
        out[2] = expected / f_total
        out[3] = 100.0 * (out[1] - out[2])
    else:
        out[1] = out[2] = out[3] = np.nan


def statistics_from_sums_twin(sums: np.ndarray) -> np.ndarray:
    """(n, 4) float64 of S, WT, WTrand, L from (n, N_COLUMNS) count sums, by the estimators'
    own formulas (the kernel's `_statistics_into` repeats their float operations in order)."""
    sums = np.asarray(sums, dtype=np.int64)
    out = np.empty((sums.shape[0], N_STATISTICS), dtype=np.float64)
    out[:, 0] = swing(sums[:, TOOL_MINUS], sums[:, TOOL_PLUS], sums[:, IN_S])
    counts = [sums[:, stratum_columns(offset)] for offset in (N_OFF, F_OFF, K_OFF, H_OFF)]
    out[:, 1], out[:, 2], out[:, 3] = targeting_from_counts(*counts)
    return out


# ---------------------------------------------------------------- the fused bootstrap


@numba.njit(inline="always", cache=True)
def _count_draws(unit_type, n_units, key, r, counts):
    """Add replicate r's draws to counts[type, 0 or 1] (high / low half-word)."""
    pairs, half = n_units // 2, (n_units + 1) // 2
    state = key + np.uint64(r * half) * _GOLDEN  # SplitMix64 state before position r*half
    for _ in range(pairs):
        state += _GOLDEN
        word = _mix(state)
        counts[unit_type[_scale(word >> _SHIFT32, n_units)], 0] += 1
        counts[unit_type[_scale(word & _LOW32, n_units)], 1] += 1
    if pairs < half:  # odd n: the last word gives one draw
        counts[unit_type[_scale(_mix(state + _GOLDEN) >> _SHIFT32, n_units)], 0] += 1


@numba.njit(inline="always", cache=True)
def _count_two(unit_type, n_units, key, r, first, second):
    """_count_draws for replicates r and r + 1 at once: two independent streams in one loop give
    the processor twice the independent work (the increments of one replicate form chains)."""
    pairs, half = n_units // 2, (n_units + 1) // 2
    state_a = key + np.uint64(r * half) * _GOLDEN
    state_b = key + np.uint64((r + 1) * half) * _GOLDEN
    for _ in range(pairs):
        state_a += _GOLDEN
        state_b += _GOLDEN
        word_a, word_b = _mix(state_a), _mix(state_b)
        first[unit_type[_scale(word_a >> _SHIFT32, n_units)], 0] += 1
        second[unit_type[_scale(word_b >> _SHIFT32, n_units)], 0] += 1
        first[unit_type[_scale(word_a & _LOW32, n_units)], 1] += 1
        second[unit_type[_scale(word_b & _LOW32, n_units)], 1] += 1
    if pairs < half:
        first[unit_type[_scale(_mix(state_a + _GOLDEN) >> _SHIFT32, n_units)], 0] += 1
        second[unit_type[_scale(_mix(state_b + _GOLDEN) >> _SHIFT32, n_units)], 0] += 1


@numba.njit(inline="always", cache=True)
def _finish(types, counts, sums, out):
    """Sum the drawn types' contribution rows and evaluate the statistics into out."""
    sums[:] = 0
    for k in range(types.shape[0]):
        count = np.int64(counts[k, 0]) + np.int64(counts[k, 1])
        if count:
            for c in range(types.shape[1]):
                sums[c] += count * types[k, c]
    _statistics_into(sums, out)


@numba.njit(parallel=True, cache=True)
def bootstrap_statistics(types, unit_type, n_boot, key):
    """S, WT, WTrand, L of n_boot replicates, (n_boot, 4) float64.

    `types` (K, N_COLUMNS) holds the distinct contribution rows and `unit_type` (n,) the type of
    each resampling unit (problem or cluster; uint16 when K < 2**16 keeps it small in cache);
    replicate r draws n units with draw_indices_twin's stream.
    """
    n_units, n_types, n_cols = unit_type.shape[0], types.shape[0], types.shape[1]
    out = np.empty((n_boot, N_STATISTICS), dtype=np.float64)
    n_blocks = (n_boot + _BLOCK - 1) // _BLOCK
    for block in numba.prange(n_blocks):
        # Buffers once per block of replicates, not per replicate: allocation is not free. Each
        # replicate counts its draws in two columns (high and low half-words), which halves the
        # chains of increments to one counter.
        first = np.empty((n_types, 2), dtype=np.int32)
        second = np.empty((n_types, 2), dtype=np.int32)
        sums = np.empty(n_cols, dtype=np.int64)
        stop = min(n_boot, (block + 1) * _BLOCK)
        r = block * _BLOCK
        while r + 1 < stop:
            first[:] = 0
            second[:] = 0
            _count_two(unit_type, n_units, key, r, first, second)
            _finish(types, first, sums, out[r])
            _finish(types, second, sums, out[r + 1])
            r += 2
        if r < stop:
            first[:] = 0
            _count_draws(unit_type, n_units, key, r, first)
            _finish(types, first, sums, out[r])
    return out


def bootstrap_statistics_twin(
    types: np.ndarray, unit_type: np.ndarray, n_boot: int, key: np.uint64, chunk: int | None = None
) -> np.ndarray:
    """numpy twin of bootstrap_statistics (same draws, same sums, same formulas), in chunks of
    replicates (by default about 4M draws per chunk, to bound memory)."""
    n_units, n_types = len(unit_type), len(types)
    chunk = chunk or max(1, min(n_boot, 2**22 // max(n_units, 1)))
    out = np.empty((n_boot, N_STATISTICS), dtype=np.float64)
    for start in range(0, n_boot, chunk):
        stop = min(start + chunk, n_boot)
        drawn = unit_type[draw_indices_twin(n_units, stop - start, key, first_replicate=start)]
        offsets = (np.arange(stop - start) * n_types)[:, None]
        counts = np.bincount((drawn + offsets).ravel(), minlength=(stop - start) * n_types)
        sums = counts.reshape(stop - start, n_types) @ types  # integer matmul: exact
        out[start:stop] = statistics_from_sums_twin(sums)
    return out


# ---------------------------------------------------------------- resampled column sums


@numba.njit(parallel=True, cache=True)
def bootstrap_sums(types, unit_type, n_boot, key):
    """The resampled column sums of n_boot replicates, (n_boot, C) int64.

    The generic form of `bootstrap_statistics` for estimators whose statistics are computed from
    the sums outside the kernel (delegation_value.py): the same draws (draw_indices' stream), the
    same type counting, the sums returned instead of the four statistics.
    """
    n_units, n_types, n_cols = unit_type.shape[0], types.shape[0], types.shape[1]
    out = np.zeros((n_boot, n_cols), dtype=np.int64)
    n_blocks = (n_boot + _BLOCK - 1) // _BLOCK
    for block in numba.prange(n_blocks):
        counts = np.empty((n_types, 2), dtype=np.int32)
        for r in range(block * _BLOCK, min(n_boot, (block + 1) * _BLOCK)):
            counts[:] = 0
            _count_draws(unit_type, n_units, key, r, counts)
            for k in range(n_types):
                count = np.int64(counts[k, 0]) + np.int64(counts[k, 1])
                if count:
                    for c in range(n_cols):
                        out[r, c] += count * types[k, c]
    return out


def bootstrap_sums_twin(
    types: np.ndarray, unit_type: np.ndarray, n_boot: int, key: np.uint64, chunk: int | None = None
) -> np.ndarray:
    """numpy twin of bootstrap_sums (same draws, integer sums: identical output)."""
    n_units, n_types = len(unit_type), len(types)
    chunk = chunk or max(1, min(n_boot, 2**22 // max(n_units, 1)))
    out = np.empty((n_boot, types.shape[1]), dtype=np.int64)
    for start in range(0, n_boot, chunk):
        stop = min(start + chunk, n_boot)
        drawn = unit_type[draw_indices_twin(n_units, stop - start, key, first_replicate=start)]
        offsets = (np.arange(stop - start) * n_types)[:, None]
        counts = np.bincount((drawn + offsets).ravel(), minlength=(stop - start) * n_types)
        out[start:stop] = counts.reshape(stop - start, n_types) @ types
    return out
