"""Decoding: the sampling parameters and greedy and seeded sampling."""
