"""The statistic-free bootstrap: unit compression, resampled sums, percentile intervals, row weights."""

from __future__ import annotations

import numpy as np
import pytest

from nudgeability.stats.resampling import kernels
from nudgeability.stats.resampling.bootstrap import (
    Interval,
    Resamples,
    aggregate_by_cluster,
    compress,
    percentile_interval,
    resample_sums,
)


@pytest.mark.parametrize(
    "high", [2, 40]
)  # small values: integer keys; large: row-wise unique fallback
def test_compress_merges_equal_rows_and_maps_each_unit_to_its_type(high):
    units = np.random.default_rng(high).integers(0, high, size=(500, 20))
    types, unit_type = compress(units)
    np.testing.assert_array_equal(types[unit_type], units)
    assert len(np.unique(types, axis=0)) == len(types)


def test_resampled_sums_are_the_sums_of_the_drawn_units_by_either_engine():
    # 301 units and 301 replicates: odd counts take the kernel's tail paths (an odd draw count,
    # an odd replicate left over after the pairs of replicates).
    units = np.random.default_rng(4).integers(0, 3, size=(301, 7))
    got = resample_sums(units, 301, seed=6)
    assert got.dtype == np.int64 and got.shape == (301, 7)
    indices = kernels.draw_indices_twin(301, 301, kernels.seed_key(6))
    brute = np.array([[units[i] for i in row] for row in indices]).sum(axis=1)
    np.testing.assert_array_equal(got, brute)
    np.testing.assert_array_equal(got, resample_sums(units, 301, seed=6, engine="numpy"))
    assert not np.array_equal(got, resample_sums(units, 301, seed=7))
    # no unit: every replicate sums nothing
    assert resample_sums(np.zeros((0, 7), dtype=np.int64), 5, seed=0).tolist() == [[0] * 7] * 5


def test_clusters_are_summed_in_ascending_id_order():
    contrib = np.array([[1, 0], [0, 1], [2, 2], [5, 0]])
    summed = aggregate_by_cluster(contrib, np.array([3, 1, 3, 0]))
    assert summed.tolist() == [[5, 0], [0, 1], [3, 2]]


def test_percentile_interval_is_numpys_linear_percentile_of_the_finite_values():
    values = np.array([np.nan, 4.0, 1.0, 3.0, np.nan, 2.0, 10.0])
    low, high = np.percentile([4.0, 1.0, 3.0, 2.0, 10.0], [5.0, 95.0])
    assert percentile_interval(values, 0.9) == Interval(low, high)
    assert np.isnan(percentile_interval(np.full(3, np.nan)).low)
    assert Interval(0.5, 2.0).excludes_zero and not Interval(-0.5, 2.0).excludes_zero


def test_row_weights_count_each_row_as_often_as_its_problem_is_drawn():
    cluster = np.array([7, 7, 2, 9, 2])  # problems 2, 7, 9 -> units 0, 1, 2
    resamples = Resamples.draw(cluster, 50, seed=3)
    drawn = kernels.draw_indices_twin(3, 50, kernels.seed_key(3))
    counts = np.stack([np.bincount(row, minlength=3) for row in drawn])
    np.testing.assert_array_equal(resamples.counts, counts)
    (weights,) = list(resamples.weights())
    np.testing.assert_array_equal(weights, counts[:, [1, 1, 0, 2, 0]])
    twin = Resamples.draw(cluster, 50, seed=3, engine="numpy")
    np.testing.assert_array_equal(twin.counts, resamples.counts)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: resample_sums(np.ones((3, 2)), 0, seed=0), "n_boot must be a positive"),
        (lambda: resample_sums(np.ones((3, 2)), 5, seed=0, engine="gpu"), "engine must be"),
        (lambda: percentile_interval(np.ones(3), 95), r"confidence must lie in \(0, 1\)"),
        (lambda: Resamples.draw(np.arange(3), 5, 0, engine="cuda"), "engine must be"),
    ],
)
def test_bad_arguments_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
