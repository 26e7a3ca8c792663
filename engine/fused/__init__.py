"""A decoder layer's small ops as Triton kernels on CUDA (engine/README.md)."""
