"""Which engine steps run the fixed-shape decode, and when the engine gives it up for good.

`StaticDecodeDispatch` holds the engine's `static_decode` state: one `StaticDecode` per bucket
(`static_decode.py`), and the CUDA graphs that replay them (`graphed_decode.py`). A step whose rows
all feed one token runs on a bucket's buffers, through a graph where graphs are on; anything else
runs the eager cascade (`shared_prefix_attention.py`), recorded once per reason. The compiler
refusing a step (`StaticDecodeUnavailable`) or a bucket's first captured step disagreeing with the
eager cascade on the same step drops the fixed-shape decode for the rest of the engine's life.
`Engine._run` (engine/engine.py) asks `run` first and runs the step eagerly where it says None.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from nudgeability.engine.attention.graphed_decode import EAGER, GraphedDecode, agrees
from nudgeability.engine.attention.static_decode import (
    BUCKETS,
    MAX_SEGMENTS,
    StaticDecode,
    StaticDecodeUnavailable,
    head_dims,
    refusal,
)
from nudgeability.engine.errors import EngineInputError
from nudgeability.engine.scheduling.step_plan import StepPlan
from nudgeability.util import fallbacks

# `Engine._run_eager`: a step on the eager cascade -> (its layout, the final hidden states)
Eager = Callable[[StepPlan], tuple]


class StaticDecodeDispatch:
    """The fixed-shape decode of one engine (`Engine(static_decode=..., cuda_graphs=...)`).

    `cuda_graphs` None means on exactly where static_decode runs on CUDA; asking for graphs off
    CUDA or without static_decode is an EngineInputError. On CUDA, a block size or head size the
    compiled kernel cannot take turns static_decode off up front (recorded), not at a step."""

    def __init__(self, runner, block_size: int, static_decode: bool | None, cuda_graphs):
        on_cuda = runner.device.type == "cuda"
        self.enabled = bool(static_decode)
        use_graphs = on_cuda and self.enabled if cuda_graphs is None else cuda_graphs
        if use_graphs and not on_cuda:
            raise EngineInputError("cuda_graphs needs the model on a CUDA device")
        if use_graphs and not self.enabled:
            raise EngineInputError("cuda_graphs needs static_decode=True (the fixed-shape decode)")
        if self.enabled and on_cuda:
            why = refusal(block_size, head_dims(runner.model))
            if why is not None:  # refused up front, not an exception at the first step
                fallbacks.record("static_decode (compiled FlexAttention)", EAGER, why)
                self.enabled = use_graphs = False
        self.graphs = GraphedDecode(runner.forward) if use_graphs else None
        self.statics: dict[int, StaticDecode] = {}
        self.device, self.block_size = runner.device, block_size

    def run(self, plan: StepPlan, pool, cache, forward, eager: Eager, pad_id: int):
        """The step on a bucket's buffers, `(static, hidden)`; `eager(plan)`'s result where the
        fixed-shape decode gives up during it; None where the step is not one for it. `forward`
        is the engine's forward (`Engine._forward`), `cache` its `kv_cache.PoolCache`."""
        static = self.buffers_for(plan, pool)
        if static is None:
            return None
        static.load(plan, pad_id)
        cache.layout = static
        try:
            with torch.inference_mode():
                if self.graphs is not None:
                    hidden = self.graphs.run(cache, static)
                else:
                    hidden = forward(cache, static.input_ids, static.positions)
        except StaticDecodeUnavailable:  # recorded where it happened; eager from now on
            self.drop()
            return eager(plan)
        if self.graphs is not None and static.rows not in self.graphs.checked:
            return self._self_check(plan, static, hidden, cache, eager)
        return static, hidden

    def _self_check(self, plan: StepPlan, static: StaticDecode, hidden, cache, eager: Eager):
        """A bucket's first captured step against the eager cascade on the same step (run after
        it, so the pool keeps the eager K/V); on disagreement, eager for good (graphed_decode)."""
        with torch.inference_mode():
            captured = hidden[0].index_select(0, static.sample_index).clone()
        layout, reference = eager(plan)
        with torch.inference_mode():
            expected = reference[0].index_select(0, layout.sample_index)
        if agrees(f"cuda graph of static_decode bucket {static.rows}", captured, expected):
            self.graphs.checked.add(static.rows)
            cache.layout = static
            return static, hidden
        self.drop()
        return layout, reference

    def drop(self) -> None:
        """The fixed-shape decode off for good: every later step runs the eager cascade."""
        self.enabled = False
        self.graphs = None
        self.statics.clear()

    def buffers_for(self, plan: StepPlan, pool) -> StaticDecode | None:
        """The fixed-shape buffers for a step of single-token rows, or None to run it eagerly."""
        rows = len(plan.row_chunks)
        decoding = sum(s1 - s0 == 1 for _, s0, s1 in plan.row_chunks)
        if not self.enabled or not decoding:
            return None  # a step that only prefills runs eagerly by design
        if plan.prefix_chunks or decoding < rows:
            why = "decode rows in a step that also prefills run with the prefill, no graph"
            fallbacks.record("static_decode (mixed step)", EAGER, why)
            return None
        if rows > BUCKETS[-1]:
            why = f"more decode rows than the largest bucket ({BUCKETS[-1]})"
            fallbacks.record("static_decode (wide step)", EAGER, why)
            return None
        if any(len(row.group.segments) > MAX_SEGMENTS for row, _, _ in plan.row_chunks):
            why = f"a prefix of more than {MAX_SEGMENTS} segments"
            fallbacks.record("static_decode (many segments)", EAGER, why)
            return None
        bucket = next(b for b in BUCKETS if b >= rows)
        static = self.statics.get(bucket)
        if (
            static is None
            or static.pool is not pool
            or static.kv_indices.shape[-1] != pool.num_blocks
        ):
            static = StaticDecode(bucket, pool, self.device, self.block_size)
            self.statics[bucket] = static
            if self.graphs is not None:
                self.graphs.drop(bucket)
        return static
