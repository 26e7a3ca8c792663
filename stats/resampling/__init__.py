"""Resampling, apart from the statistics (as scipy.stats.bootstrap keeps them apart)."""
