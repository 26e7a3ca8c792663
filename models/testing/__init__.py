"""Tiny random-weight stand-ins for real checkpoints and the HF greedy reference, for tests."""
