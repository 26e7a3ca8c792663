"""Decoding: the sampling parameters (`sampling_params.py`) and greedy and seeded sampling
(`sampler.py`)."""
