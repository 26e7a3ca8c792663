"""CUDA graphs of the fixed-shape decode step (`static_decode.py`), and the self-check that a
captured step agrees with the eager cascade before it is trusted.

`GraphedDecode` warms each bucket's step up on a side stream (which compiles its FlexAttention
calls) and captures it, the LM head and the greedy argmax included (`with_greedy_head`: its logits
are a graph output too, the step's one LM-head product), all buckets up to the row cap before the
engine's first step (`Engine.capture`), largest first, into one graph memory pool; each step
replays its bucket's graph. Everything the captured region reads is a persistent buffer
(`StaticDecode.buffers()`, the pool, the weights), so a replay computes the step `load()` wrote.
Before the run, each bucket's captured step is compared once with the eager cascade on the same
probe step (engine/kernel_checks.py; `agrees`: every real row's final hidden states and the K/V of
`written_kv`'s layers, sampling rows or not); on a disagreement beyond the dtype's bound it warns,
records the fallback and runs eagerly from then on. A capture the device or the compiler cannot
make (`capture_errors`) is recorded the same way and raises `StaticDecodeUnavailable`, on which
the engine runs the eager cascade instead of failing.
"""

from __future__ import annotations

import time

import torch

from nudgeability.engine.attention.static_decode import StaticDecodeUnavailable
from nudgeability.engine.sampling.sampler import greedy
from nudgeability.util import fallbacks

# Largest |captured - eager| over what the step wrote (every real row's final hidden states; the
# K/V at the rows' slots in `written_kv`'s layers), relative to the largest |eager| value: two
# attention kernels summing in other orders differ by a few units of the dtype's last place per
# layer; a stale slot or a wrong mask moves the states by O(1). bf16's bound leaves room for a
# deep model: on a GPU, two correct paths of a random-init Qwen3-8B shape (36 layers) can differ
# by over half of it, and a bucket that fails the check runs the much slower eager step from then
# on (benchmarks/gpu_check.py). On CPU (tests/engine/attention/test_graph_self_check_bound.py, the
# first decode step after a fork) correct paths stay well below the bound at 12 and 36 layers,
# and a step whose rows read each other's own keys lies well above it.
SELF_CHECK_BOUND = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 1e-1}
EAGER = "eager cascade (step_attention)"


def capture_errors() -> tuple[type[Exception], ...]:
    """What warming a bucket's step up and capturing it can raise when the device or the compiler
    cannot make the graph: the compiler's and Triton's errors (`fallbacks.compiler_errors`), a
    CUDA error such as an invalidated capture (`torch.AcceleratorError`, which torch raises for
    every failed CUDA call, `cudaStreamEndCapture`'s included), and the graph pool running out of
    memory. Not every RuntimeError: a wrong argument to an op of our own is one too, and a bug."""
    cuda = getattr(torch, "AcceleratorError", None)  # torch >= 2.8; before, a plain RuntimeError
    return fallbacks.compiler_errors() + (torch.OutOfMemoryError,) + ((cuda,) if cuda else ())


def relative_difference(captured: torch.Tensor, reference: torch.Tensor) -> float:
    """max |captured - reference| / max |reference| (one host read: this runs once per bucket);
    0 for empty tensors (nothing was computed, so nothing differs; `amax` refuses them)."""
    if reference.numel() == 0:
        return 0.0
    scale = reference.float().abs().amax().clamp_min(1e-30)
    diff = (captured.float() - reference.float()).abs().amax() / scale
    value = diff.item()
    return float("inf") if value != value else value  # NaN disagrees with everything


def agrees(
    path: str,
    captured: torch.Tensor,
    reference: torch.Tensor,
    used: str = EAGER,
    what: str = "the hidden states",
) -> bool:
    """Whether the `captured` fast path's output agrees with the eager `reference` on the same
    step within the dtype's bound (empty tensors agree); if not, warn once naming `path`, `what`
    was compared and the difference, and record the fallback to `used` (util.fallbacks)."""
    bound = SELF_CHECK_BOUND.get(reference.dtype, 1e-3)
    difference = relative_difference(captured, reference)
    if difference <= bound:
        return True
    fallbacks.record(
        path,
        used,
        f"its first step differs from the eager cascade by {difference:.3g} (relative, max over "
        f"{what}; bound {bound:g} in {reference.dtype})",
    )
    return False


def written_kv(pool, slots: torch.Tensor) -> dict[int, torch.Tensor]:
    """A copy of what `pool` (kv_pool.KVPool) holds at `slots`, by layer, [2, kv heads,
    len(slots), head_dim] (K then V), for the first layer of each kv head count: where the step's
    write index for that count (`StaticDecode.write_index`) is first used, and K/V depend on the
    step's ids and positions and little else. Deeper layers are left to the final hidden states:
    there two correct paths' K/V part by about twice as much as the states (bf16 on CPU: 0.04
    against 0.02 at 36 layers), which would crowd the bound."""
    first: dict[int, int] = {}
    for layer, k in enumerate(pool.k):
        if k is not None:  # a layer that reads another's K/V holds none
            first.setdefault(k.shape[0], layer)
    return {
        layer: torch.stack(
            [pool.k[layer].index_select(1, slots), pool.v[layer].index_select(1, slots)]
        )
        for layer in first.values()
    }


def with_greedy_head(forward, logits):
    """The fixed-shape decode step as a graph captures it: `forward(cache, input_ids, positions)`
    (`ModelRunner.forward`), then the LM head on every bucket row (`logits`, `ModelRunner.logits`)
    and the greedy choice (`sampler.greedy`), so that a greedy step's tokens come out of the
    replay itself. Returns (hidden states [1, rows, hidden], fp32 logits [rows, vocab], argmax
    ids [rows]): the step's one LM-head product, at the bucket's shape, which every consumer of
    the step reads (sampled rows, `return_logits`, token statistics: engine/sampling/choose.py)."""

    def step(cache, input_ids: torch.Tensor, positions: torch.Tensor):
        hidden = forward(cache, input_ids, positions)
        product = logits(hidden[0])
        return hidden, product, greedy(product)

    return step


class GraphedDecode:
    """CUDA graphs of the decode step (`with_greedy_head`), one per bucket, in one shared graph
    memory pool; `StaticDecodeDispatch.capture_all` captures them before the first step, largest
    first, and a bucket met later (the pool was replaced) is captured on first use (CUDA only)."""

    def __init__(self, step):
        self.step = step
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor, ...]]] = {}
        self.checked: set[int] = set()  # buckets whose captured step agreed with the eager one
        # host seconds each bucket's warm-up (the flex kernels' compile) and capture took
        self.seconds: dict[int, float] = {}
        # One memory pool for every bucket's graph: a replay's intermediates are dead once it
        # returns, so graphs that never run at once can share them (each keeps its outputs).
        self.pool = None

    def drop(self, bucket: int) -> None:
        """Forget a bucket's graph (its buffers were replaced): the next use captures anew."""
        self.graphs.pop(bucket, None)
        self.checked.discard(bucket)

    def capture(self, cache, static) -> None:
        """Warm the bucket's step up (it compiles the flex kernels and makes every buffer the
        forward asks for, e.g. the write index per head count) on a side stream, then capture it
        on the buffers `static.load()` rewrites. A capture that fails (`capture_errors`) is
        recorded and raises `StaticDecodeUnavailable`."""
        start = time.perf_counter()
        try:
            self._capture(cache, static)
            self.seconds[static.rows] = time.perf_counter() - start
        except capture_errors() as error:
            self.graphs.pop(static.rows, None)
            fallbacks.record(
                f"cuda graph of static_decode bucket {static.rows}",
                EAGER,
                f"its capture failed: {type(error).__name__}: {str(error)[:300]}",
            )
            raise StaticDecodeUnavailable(str(error)) from error

    def _capture(self, cache, static) -> None:
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self.step(cache, static.input_ids, static.positions)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            outputs = self.step(cache, static.input_ids, static.positions)
        self.graphs[static.rows] = (graph, outputs)

    def run(self, cache, static) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Replay the bucket's graph on what `load()` wrote: (hidden states, logits, greedy ids),
        the graph's own output tensors, to read before the next replay."""
        if static.rows not in self.graphs:
            self.capture(cache, static)
        graph, outputs = self.graphs[static.rows]
        graph.replay()
        return outputs
