"""Attention over the KV pool: the eager cascade, the fixed-shape decode and its CUDA graphs."""
