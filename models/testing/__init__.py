"""Tiny random-weight stand-ins for real checkpoints, for tests and benchmarks only."""
