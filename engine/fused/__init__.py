"""A decoder layer's small ops as Triton kernels on CUDA: fewer launches per layer at decode.

- `triton_ops.py`: the kernels (RMSNorm, with the residual add or not; act(gate) * up; a head's
  norm and rotary embedding) and the wrappers that launch them with block sizes fixed by the
  shapes.
- `layers.py`: where a model meets them. `adopt(model)` swaps the classes of the HF modules that
  have a fused form (as engine/invariant/linears.py swaps linears), and `fused_forward()` is the
  context the model runner enters around each CUDA forward; outside it the model computes as it
  always did. On CPU nothing is adopted: the CPU records stay the invariant construction's.

What is fused per family, how it is checked on CPU and what only a GPU can check:
engine/README.md, *Fused layer kernels*.
"""
