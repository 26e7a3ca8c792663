"""The numba kernels equal their numpy twins exactly, and do not depend on the thread count."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from helpers import staged_kernels as staged
from scipy import stats as sps

from nudgeability.stats import contributions, kernels
from nudgeability.stats.contributions import N_COLUMNS, compress


@pytest.fixture
def contrib(planted):
    arrays = planted.sample(np.random.default_rng(3), 301)
    return contributions(arrays["s"], arrays["base"], arrays["conf"], arrays["doubt"])


def test_sums_from_indices_kernel_equals_twin_for_fixed_indices(contrib):
    indices = np.random.default_rng(11).integers(0, len(contrib), size=(257, len(contrib)))
    got, want = (
        staged.sums_from_indices(contrib, indices),
        kernels.sums_from_indices_twin(contrib, indices),
    )
    assert got.dtype == want.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_statistics_kernel_equals_twin_bit_for_bit_including_undefined_rows(contrib):
    indices = np.random.default_rng(12).integers(0, len(contrib), size=(500, len(contrib)))
    sums = kernels.sums_from_indices_twin(contrib, indices)
    sums = np.vstack(
        [sums, np.zeros((1, N_COLUMNS), dtype=np.int64), sums[:1] * 3]
    )  # NaN row, scaled row
    got, want = staged.statistics_from_sums(sums), kernels.statistics_from_sums_twin(sums)
    assert np.isnan(got[-2]).all()
    np.testing.assert_array_equal(
        got.view(np.uint64), want.view(np.uint64)
    )  # exact bits, NaN included


def test_draw_indices_kernel_equals_twin_and_fused_bootstrap_equals_its_parts(contrib):
    # 301 problems and 301 replicates: odd counts take the kernel's tail paths too.
    key = kernels.seed_key(5)
    idx = staged.draw_indices(len(contrib), 301, key)
    np.testing.assert_array_equal(idx, kernels.draw_indices_twin(len(contrib), 301, key))
    # chunked twin draws continue the same streams
    np.testing.assert_array_equal(
        idx[100:], kernels.draw_indices_twin(len(contrib), 201, key, first_replicate=100)
    )
    types, unit_type = compress(contrib)
    fused = kernels.bootstrap_statistics(types, unit_type.astype(np.uint16), 301, key)
    twin = kernels.bootstrap_statistics_twin(types, unit_type, 301, key, chunk=64)
    parts = staged.statistics_from_sums(staged.sums_from_indices(contrib, idx))
    np.testing.assert_array_equal(fused.view(np.uint64), twin.view(np.uint64))
    np.testing.assert_array_equal(fused.view(np.uint64), parts.view(np.uint64))


@pytest.mark.skipif(
    numba.config.NUMBA_NUM_THREADS < 2, reason="numba has a single thread on this machine"
)
def test_bootstrap_kernel_gives_the_same_replicates_with_one_or_two_threads(contrib):
    types, unit_type = compress(contrib)
    key = kernels.seed_key(0)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = kernels.bootstrap_statistics(types, unit_type, 2000, key)
        numba.set_num_threads(2)
        two = kernels.bootstrap_statistics(types, unit_type, 2000, key)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(one.view(np.uint64), two.view(np.uint64))
    again = kernels.bootstrap_statistics(types, unit_type, 2000, key)
    np.testing.assert_array_equal(one.view(np.uint64), again.view(np.uint64))
    other = kernels.bootstrap_statistics(types, unit_type, 2000, kernels.seed_key(1))
    assert not np.array_equal(one, other)


def test_resample_draws_are_uniform_over_units():
    # 2,000 replicates of 97 draws each: the count of each unit is ~ multinomial; chi-square test.
    idx = staged.draw_indices(97, 2000, kernels.seed_key(123))
    counts = np.bincount(idx.ravel(), minlength=97)
    assert idx.min() == 0 and idx.max() == 96
    assert sps.chisquare(counts).pvalue > 1e-3
