"""Resampling, apart from the statistics (as scipy.stats.bootstrap keeps them apart).

kernels.py: the numba kernels of one SplitMix64 stream of draws (`resample_sums`, `draw_counts`),
each with a bit-identical numpy twin. bootstrap.py: the statistic-free bootstrap over problems
(units compressed into types, `resample_sums`, `percentile_interval`, `Interval`, and `Resamples`,
the same draws as row weights). The estimators turn the resampled sums into their statistics.
"""
