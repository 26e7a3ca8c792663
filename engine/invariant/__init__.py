"""Batch invariance: a sequence's tokens and logits that depend on no batch, schedule or core count.

The engine's records must be the same bytes whether a row is computed alone or among hundreds,
early or late in a stream, by one worker or two, at any thread count: that is what makes an arm
equal its solo run, a resume equal an uninterrupted run, and a replay an audit. A library kernel
does not promise it: it may choose its blocking, and so the order of a row's sums, by the shape
of the call and the threads it has. This package is where the engine gets that promise back,
and the only place that knows how.

- `linears.py`: where it begins. `adopt(model)` replaces the model's linears (their class
  swapped, as gpt-fast swaps modules; the quantised ones given the invariant product), and
  `invariant_forward()` is the context the engine's model runner enters around each CPU forward:
  inside it the products run in fixed shapes on one torch thread, the threads becoming cores
  that share whole calls; outside it the model computes as it always did.
- `cpu/`: the CPU construction. `products.py` (every product in 16-row tiles and weight slices
  fixed by the weight's shape; larger blocks only where a check on the machine gives a tile's
  bits), `attention.py` (the attention's calls on shapes fixed by the row alone: the prefix in
  query tiles over whole key blocks, a row's own keys padded to their block), `cores.py` (whole
  calls shared between threads, so which core runs a call decides no bit), `reordered.py` (the
  weights kept in oneDNN's layout, for a run that owns its model).
- `needle.py`: where the promise is checked. What no library documents (that a row keeps its bits
  wherever it sits inside a fixed-shape call) is asked of the machine before a run relies on it:
  vLLM's needle test on the run's own model, its answer cached by everything that picks a
  kernel.

A GPU's batch-invariant kernels belong beside `cpu/` (a `cuda/` of the same shape: products,
attention, entered by the same `adopt` and context). Until they exist a CUDA run keeps the
library's kernels, and its schedule does not rest on invariance (splice/run/schedule.py).
The cost of the construction and what it rests on: engine/README.md, *Batch invariance*.
"""
