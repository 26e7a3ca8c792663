"""Fixtures of the paged kernel's tests: `ordered_dot`, a `tl.dot` for Triton's interpreter whose
rows do not depend on their place in the tile.

The interpreter computes `tl.dot` with numpy's matmul (triton/runtime/interpreter.py,
`InterpreterBuilder.create_dot`), so BLAS decides how each output element's products are summed,
and may sum a row differently by its place among the tile's rows. A GPU's MMA sums each element
in an order fixed by the tile's shape, which is what the invariant kernels rely on. `ordered_dot`
(a fixture) replaces the interpreter's dot, inside the test only, by a k-ascending chain in the
accumulator's dtype: element (i, j) is `((d + a[i,0]b[0,j]) + a[i,1]b[1,j]) + ...`, each product
and sum rounded as numpy's elementwise arithmetic does, the same for every row and tile size.
"""

from __future__ import annotations

import pytest
from triton.runtime.interpreter import InterpreterBuilder, TensorHandle


def _chain_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    acc = d.data.copy()
    left = a.data.astype(acc.dtype)
    right = b.data.astype(acc.dtype)
    for k in range(left.shape[-1]):
        acc = acc + left[..., :, k : k + 1] * right[..., k : k + 1, :]
    return TensorHandle(acc.astype(d.data.dtype), d.dtype.scalar)


@pytest.fixture
def ordered_dot(monkeypatch):
    """The interpreter's `tl.dot` as a k-ascending chain (module docstring), for this test."""
    monkeypatch.setattr(InterpreterBuilder, "create_dot", _chain_dot)
    yield
