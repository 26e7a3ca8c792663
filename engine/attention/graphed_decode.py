"""CUDA graphs of the fixed-shape decode forward (`static_decode.py`), and the self-check that a
captured step agrees with the eager cascade before it is trusted.

`GraphedDecode` warms a bucket's forward up on a side stream (which compiles its FlexAttention
calls), captures it once and replays it at every later step of that bucket. Everything the
captured region reads is a persistent buffer (`StaticDecode.buffers()`, the pool, the weights),
so a replay computes the step `load()` wrote. The first time a bucket's captured step runs, the
engine compares it once with the eager cascade on the same step (`agrees`); on a disagreement
beyond the dtype's bound it warns, records the fallback and runs eagerly from then on.
"""

from __future__ import annotations

import torch

from nudgeability.util import fallbacks

# Largest |captured - eager| over the sampled rows' final hidden states, relative to the largest
# |eager| value: two attention kernels summing in other orders differ by a few units of the
# dtype's last place per layer; a stale slot or a wrong mask moves the states by O(1). bf16's
# bound leaves room for a deep model: on a GPU, two correct paths of a random-init Qwen3-8B shape
# (36 layers) can differ by over half of it, and a bucket that fails the check runs the much
# slower eager step from then on (benchmarks/gpu_check.py). On CPU
# (tests/engine/attention/test_graph_self_check_bound.py, the first decode step after a fork) correct paths
# stay well below the bound at 12 and 36 layers, and a step whose rows read each other's own keys
# lies well above it.
SELF_CHECK_BOUND = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 1e-1}
EAGER = "eager cascade (step_attention)"


def relative_difference(captured: torch.Tensor, reference: torch.Tensor) -> float:
    """max |captured - reference| / max |reference| (one host read: this runs once per bucket)."""
    scale = reference.float().abs().amax().clamp_min(1e-30)
    diff = (captured.float() - reference.float()).abs().amax() / scale
    value = diff.item()
    return float("inf") if value != value else value  # NaN disagrees with everything


def agrees(path: str, captured: torch.Tensor, reference: torch.Tensor, used: str = EAGER) -> bool:
    """Whether the `captured` fast path's output agrees with the eager `reference` on the same
    step within the dtype's bound; if not, warn once naming `path` and the difference, and record
    the fallback to the eager cascade (util.fallbacks)."""
    bound = SELF_CHECK_BOUND.get(reference.dtype, 1e-3)
    difference = relative_difference(captured, reference)
    if difference <= bound:
        return True
    fallbacks.record(
        path,
        used,
        f"its first step differs from the eager cascade by {difference:.3g} (relative, max over "
        f"the sampled rows' hidden states; bound {bound:g} in {reference.dtype})",
    )
    return False


class GraphedDecode:
    """CUDA graphs of the decode forward, one per bucket, captured on first use (CUDA only)."""

    def __init__(self, forward):
        self.forward = forward
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.checked: set[int] = set()  # buckets whose captured step agreed with the eager one

    def drop(self, bucket: int) -> None:
        """Forget a bucket's graph (its buffers were replaced): the next use captures anew."""
        self.graphs.pop(bucket, None)
        self.checked.discard(bucket)

    def run(self, cache, static) -> torch.Tensor:
        entry = self.graphs.get(static.rows)
        if entry is None:
            # Warm up (compiles the flex kernels and makes every buffer the forward asks for,
            # e.g. the write index per head count) on a side stream, then capture.
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self.forward(cache, static.input_ids, static.positions)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                hidden = self.forward(cache, static.input_ids, static.positions)
            entry = self.graphs[static.rows] = (graph, hidden)
        graph, hidden = entry
        graph.replay()
        return hidden
