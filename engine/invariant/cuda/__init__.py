"""Batch invariance on CUDA: Triton kernels whose launch reads no batch (engine/README.md)."""
