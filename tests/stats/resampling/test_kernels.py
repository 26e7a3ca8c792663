"""The numba kernels equal their numpy twins exactly, and do not depend on the thread count."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from helpers import staged_kernels as staged
from scipy import stats as sps

from nudgeability.stats import contributions
from nudgeability.stats.resampling import kernels
from nudgeability.stats.resampling.bootstrap import compress


@pytest.fixture
def contrib(planted):
    arrays = planted.sample(np.random.default_rng(3), 301)
    return contributions(arrays["s"], arrays["base"], arrays["conf"], arrays["doubt"])


def test_draw_indices_kernel_equals_twin_and_fused_sums_equal_their_parts(contrib):
    # 301 problems and 301 replicates: odd counts take the kernel's tail paths too.
    key = kernels.seed_key(5)
    idx = staged.draw_indices(len(contrib), 301, key)
    np.testing.assert_array_equal(idx, kernels.draw_indices_twin(len(contrib), 301, key))
    # chunked twin draws continue the same streams
    np.testing.assert_array_equal(
        idx[100:], kernels.draw_indices_twin(len(contrib), 201, key, first_replicate=100)
    )
    parts = staged.sums_from_indices(contrib, idx)
    np.testing.assert_array_equal(parts, contrib[idx].sum(axis=1))  # the stage itself, by numpy
    types, unit_type = compress(contrib)
    fused = kernels.resample_sums(types, unit_type.astype(np.uint16), 301, key)
    twin = kernels.resample_sums_twin(types, unit_type, 301, key, chunk=64)
    assert fused.dtype == twin.dtype == np.int64
    np.testing.assert_array_equal(fused, parts)
    np.testing.assert_array_equal(twin, parts)


def test_draw_counts_kernel_equals_twin_and_counts_the_plain_draws():
    key = kernels.seed_key(8)
    counts = kernels.draw_counts(13, 99, key)
    np.testing.assert_array_equal(counts, kernels.draw_counts_twin(13, 99, key))
    drawn = staged.draw_indices(13, 99, key)
    np.testing.assert_array_equal(counts, [np.bincount(row, minlength=13) for row in drawn])


@pytest.mark.skipif(
    numba.config.NUMBA_NUM_THREADS < 2, reason="numba has a single thread on this machine"
)
def test_resampling_kernel_gives_the_same_replicates_with_one_or_two_threads(contrib):
    types, unit_type = compress(contrib)
    key = kernels.seed_key(0)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = kernels.resample_sums(types, unit_type, 2000, key)
        numba.set_num_threads(2)
        two = kernels.resample_sums(types, unit_type, 2000, key)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one, kernels.resample_sums(types, unit_type, 2000, key))
    other = kernels.resample_sums(types, unit_type, 2000, kernels.seed_key(1))
    assert not np.array_equal(one, other)


def test_resample_draws_are_uniform_over_units():
    # 2,000 replicates of 97 draws each: the count of each unit is ~ multinomial; chi-square test.
    idx = staged.draw_indices(97, 2000, kernels.seed_key(123))
    counts = np.bincount(idx.ravel(), minlength=97)
    assert idx.min() == 0 and idx.max() == 96
    assert sps.chisquare(counts).pvalue > 1e-3
