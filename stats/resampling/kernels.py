"""The resampling kernels: one SplitMix64 stream of draws, counted per unit or summed per column.

One resampling machinery, many statistics (the split of scipy.stats.bootstrap, which resamples and
then calls the statistic): a replicate draws n units with replacement, and the kernels return
either how often it drew each unit (`draw_counts`) or the column sums of the drawn units' rows
(`resample_sums`). Every statistic is then computed from those by the estimators' own formulas,
in numpy (estimators/contributions.py for S, WT, WTrand and L; delegation/summary.py for the
delegation value; grounding/ weights rows by the counts). No statistic is written twice.

Randomness. Replicate r's draws are a pure function of (seed, r): SplitMix64 at stream position
r*ceil(n/2) + j yields a 64-bit word whose high and low 32-bit halves x give draws 2j and 2j+1 by
floor(x * n / 2**32) (non-uniform by a relative error below n / 2**32, 2.3e-7 at n = 1000: far
below the Monte Carlo error). Hence results depend on the seed only, never on the thread count or
on how replicates are split between threads, and the numpy twins (`*_twin`, same arguments)
reproduce the kernels bit for bit; the sums are of integers, so they are exact whatever the order.
The numba form of the plain draw (`draw_indices`), which the library never calls, lives with the
tests that check the kernels against it (tests/helpers/staged_kernels.py). The kernels are
compiled on first use and cached on disk.
"""

from __future__ import annotations

import numba
import numpy as np

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


# ---------------------------------------------------------------- resampled column sums


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
def _add_rows(types, counts, out):
    """out += the drawn types' rows, each times its count (both half-word columns)."""
    for k in range(types.shape[0]):
        count = np.int64(counts[k, 0]) + np.int64(counts[k, 1])
        if count:
            for c in range(types.shape[1]):
                out[c] += count * types[k, c]


@numba.njit(parallel=True, cache=True)
def resample_sums(types, unit_type, n_boot, key):
    """The column sums of n_boot replicates, (n_boot, C) int64: replicate r draws n units with
    draw_indices_twin's stream and adds up their rows.

    `types` (K, C) holds the distinct unit rows and `unit_type` (n,) the type of each resampling
    unit (problem or cluster; uint16 when K < 2**16 keeps it small in cache): equal rows are
    counted per type instead of added row by row, which gives the same integer sums.
    """
    n_units, n_types, n_cols = unit_type.shape[0], types.shape[0], types.shape[1]
    out = np.zeros((n_boot, n_cols), dtype=np.int64)
    n_blocks = (n_boot + _BLOCK - 1) // _BLOCK
    for block in numba.prange(n_blocks):
        # Buffers once per block of replicates, not per replicate: allocation is not free. Each
        # replicate counts its draws in two columns (high and low half-words), which halves the
        # chains of increments to one counter.
        first = np.empty((n_types, 2), dtype=np.int32)
        second = np.empty((n_types, 2), dtype=np.int32)
        stop = min(n_boot, (block + 1) * _BLOCK)
        r = block * _BLOCK
        while r + 1 < stop:
            first[:] = 0
            second[:] = 0
            _count_two(unit_type, n_units, key, r, first, second)
            _add_rows(types, first, out[r])
            _add_rows(types, second, out[r + 1])
            r += 2
        if r < stop:
            first[:] = 0
            _count_draws(unit_type, n_units, key, r, first)
            _add_rows(types, first, out[r])
    return out


def resample_sums_twin(
    types: np.ndarray, unit_type: np.ndarray, n_boot: int, key: np.uint64, chunk: int | None = None
) -> np.ndarray:
    """numpy twin of resample_sums (same draws, integer sums: identical output), in chunks of
    replicates (by default about 4M draws per chunk, to bound memory)."""
    n_units, n_types = len(unit_type), len(types)
    chunk = chunk or max(1, min(n_boot, 2**22 // max(n_units, 1)))
    out = np.empty((n_boot, types.shape[1]), dtype=np.int64)
    for start in range(0, n_boot, chunk):
        stop = min(start + chunk, n_boot)
        drawn = unit_type[draw_indices_twin(n_units, stop - start, key, first_replicate=start)]
        offsets = (np.arange(stop - start) * n_types)[:, None]
        counts = np.bincount((drawn + offsets).ravel(), minlength=(stop - start) * n_types)
        out[start:stop] = counts.reshape(stop - start, n_types) @ types  # integer matmul: exact
    return out
