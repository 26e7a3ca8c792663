"""Which rows of an engine step run the fixed-shape decode, and when the engine gives it up for good.

`StaticDecodeDispatch` holds the engine's `static_decode` state: one `StaticDecode` per bucket
(`static_decode.py`, buckets from `decode_buckets.py`), and the CUDA graphs that replay them
(`graphed_decode.py`), captured before the first step (`Engine.capture`), largest bucket first. A
step's one-token chunks of rows with blocks of their own run on a bucket's buffers, through a graph
where graphs are on (a row whose tokens go to a run, a stem's, runs eagerly: `split`); the other
rows and prefix chunks run the eager cascade (`shared_prefix_attention.py`) in a second forward (a
split step, `step_run.merged`). A step with no such chunk runs eagerly. The compiler or the capture
refusing a step (`StaticDecodeUnavailable`) or a bucket's first captured step disagreeing with the
eager cascade on the same step drops the fixed-shape decode for the rest of the engine's life.
`Engine._run` (engine/engine.py) asks `run` first and runs the step eagerly where it says None.
The kernels the graphs hold were chosen before the capture, and each bucket's first captured step
is checked on probe rows before the run (engine/kernel_checks.py), so every step of the run
computes with the one path the checks chose; `_self_check` compares on the run only a bucket
captured after that (a row cap raised after `Engine.capture`, or a pool replaced by a larger
one, which a CUDA pool never is).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from nudgeability.engine.attention.decode_buckets import bucket_for, bucket_sizes, capture_order
from nudgeability.engine.attention.graphed_decode import (
    EAGER,
    GraphedDecode,
    agrees,
    with_greedy_head,
    written_kv,
)
from nudgeability.engine.attention.static_decode import (
    StaticDecode,
    StaticDecodeUnavailable,
    head_dims,
    refusal,
)
from nudgeability.engine.errors import EngineInputError
from nudgeability.engine.invariant.cuda.mode import paged_tokens
from nudgeability.engine.sampling.choose import HostTokens
from nudgeability.engine.scheduling.step_plan import StepPlan
from nudgeability.engine.sequence import MAX_SEGMENTS
from nudgeability.engine.step_run import StepRun, merged
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
        self.runner = runner
        self.graphs = (
            GraphedDecode(with_greedy_head(runner.forward, runner.logits)) if use_graphs else None
        )
        self.statics: dict[int, StaticDecode] = {}
        self.device, self.block_size = runner.device, block_size
        self.buckets = bucket_sizes(None)  # `row_cap` sets the engine's

    def row_cap(self, max_rows: int | None) -> int | None:
        """The rows the scheduler may decode together: `max_rows`, whose buckets reach it; with
        none given, the largest bucket while the fixed-shape decode is on (no decode step is too
        wide for it), else no cap."""
        self.buckets = bucket_sizes(max_rows)
        for bucket in set(self.statics) - set(self.buckets):  # no step takes them again
            del self.statics[bucket]
            if self.graphs is not None:
                self.graphs.drop(bucket)
        if max_rows is None and self.enabled:
            return self.buckets[-1]
        return max_rows

    def head_rows(self, max_rows: int | None) -> int:
        """The most rows one step's LM head takes (`kv.reservation.memory_pool`): a bucket's,
        where the fixed-shape decode's graph runs the head on every bucket row."""
        if self.enabled or max_rows is None:
            return self.buckets[-1]
        return max_rows

    def capture_all(self, pool, cache, pad_id: int) -> None:
        """Capture every bucket's graph not captured yet, largest first
        (`decode_buckets.capture_order`), each on a step of pad rows only: a step then only
        replays. Nothing when graphs are off."""
        if self.graphs is None:
            return
        self.runner.engage()
        try:
            for bucket in capture_order(self.buckets):
                static = self._static(bucket, pool)  # a graph on other buffers dropped
                if bucket in self.graphs.graphs:
                    continue
                static.load(StepPlan(), pad_id)
                cache.layout = static
                # pad rows at position 0: no kernel check can see a wrong kernel in them
                with torch.inference_mode(), self.runner.warming():
                    self.graphs.capture(cache, static)
        # the compiler refused, or the device could not capture (a Triton launch, an invalidated
        # capture: graphed_decode.capture_errors), recorded where it happened: eager from the start
        except StaticDecodeUnavailable:
            self.drop()
        finally:
            self.runner.disengage()

    def run(
        self, plan: StepPlan, pool, cache, forward, eager: Eager, pad_id: int
    ) -> StepRun | None:
        """The step with its single-token rows on a bucket's buffers and the rest eager; None
        where the step is not one for the fixed-shape decode. `forward` is the engine's forward
        (`ModelRunner.forward`), `cache` its `kv_cache.PoolCache`, `eager` `Engine._run_eager`."""
        parts = self.split(plan)
        if parts is None:
            return None
        decode, rest = parts
        ran = self._decode(decode, pool, cache, forward, eager, pad_id)
        if rest is None:
            return ran
        chosen = {id(row) for row in decode.sampling()}
        first = [id(row) in chosen for row in plan.sampling()]
        return merged(first, ran, StepRun.of(*eager(rest)), self.runner.logits)

    def split(self, plan: StepPlan) -> tuple[StepPlan, StepPlan | None] | None:
        """(the step's one-token chunks of rows with blocks of their own, the rest of the step or
        None), or None to run the whole step eagerly: no such chunk, or the fixed-shape decode is
        off or cannot take them.

        The fixed-shape mask (`StaticDecode.load`) shows a row its group's segments and its own
        blocks, nothing else. A row whose tokens go to a run instead (`Row.stem`: a stem or a
        trunk being computed, or the rest of a prompt after a shared start) keeps its earlier
        tokens in that run, which is no segment of its own group: its chunk, one token long
        whenever the run's length is 1 more than a multiple of the prefill chunk, runs eagerly
        (the cascade reads a row's earlier tokens at its own slots, `Row.slot`, wherever
        they lie); on the bucket that token would attend to the prompt alone and write wrong K/V
        for every arm that reads the run."""
        if not self.enabled:
            return None
        single = [c for c in plan.row_chunks if c[2] - c[1] == 1 and c[0].stem is None]
        if not single:
            return None  # a step that only prefills runs eagerly by design
        if len(single) > self.buckets[-1]:  # the row cap (`row_cap`) keeps this from happening
            why = f"more decode rows than the largest bucket ({self.buckets[-1]})"
            fallbacks.record("static_decode (wide step)", EAGER, why)
            return None
        if any(len(row.group.segments) > MAX_SEGMENTS for row, _, _ in single):
            why = f"a prefix of more than {MAX_SEGMENTS} segments"
            fallbacks.record("static_decode (many segments)", EAGER, why)
            return None
        picked = {id(c[0]) for c in single}
        others = [c for c in plan.row_chunks if id(c[0]) not in picked]
        rest = StepPlan(plan.prefix_chunks, others) if plan.prefix_chunks or others else None
        return StepPlan([], single), rest

    def _decode(self, plan: StepPlan, pool, cache, forward, eager: Eager, pad_id: int) -> StepRun:
        """A step of single-token rows on a bucket's buffers (graphed where graphs are on), or on
        the eager cascade where the fixed-shape decode gives up during it."""
        static = self._static(bucket_for(len(plan.row_chunks), self.buckets), pool)
        static.load(plan, pad_id)
        cache.layout = static
        try:
            with torch.inference_mode():
                if self.graphs is not None:
                    hidden, product, ids = self.graphs.run(cache, static)
                else:
                    step = with_greedy_head(forward, self.runner.logits)
                    hidden, product, ids = step(cache, static.input_ids, static.positions)
        except StaticDecodeUnavailable:  # recorded where it happened; eager from now on
            self.drop()
            return StepRun.of(*eager(plan))
        if self.graphs is not None and static.rows not in self.graphs.checked:
            refused = self._self_check(plan, static, hidden, eager)
            if refused is not None:
                return refused
            cache.layout = static
        with torch.inference_mode():  # the ids start for the host now (choose.HostTokens)
            chosen = HostTokens(ids.index_select(0, static.sample_index))
        index = static.sample_index

        def logits() -> torch.Tensor:  # the sampling rows' logits, read in this step only
            return product.index_select(0, index)

        return StepRun.of(static, hidden, greedy_ids=chosen, static=True, logits=logits)

    def _self_check(self, plan: StepPlan, static: StaticDecode, hidden, eager: Eager):
        """A bucket's first captured step against the eager cascade on the same step (run after
        it, so the pool keeps the eager K/V): None where they agree; on disagreement, the eager
        step's `StepRun`, and eager for good (graphed_decode). The engine makes it on probe rows
        before the run (engine/kernel_checks.py).

        It compares everything the step leaves behind for every real row, sampling or not (a
        one-token prefill chunk short of its context's end chooses nothing, yet later tokens
        read its K/V): the rows' final hidden states, and the K/V at their slots of the layers
        where each write index is first used (`graphed_decode.written_kv`)."""
        rows, path = len(plan.row_chunks), f"cuda graph of static_decode bucket {static.rows}"
        with torch.inference_mode():
            captured = hidden[0, :rows].clone()
            captured_kv = written_kv(static.pool, static.slots[:rows])
        layout, reference = eager(plan)
        with torch.inference_mode():
            rows_eager = reference[0, layout.row_start : layout.row_end]
            compared = [("every real row's final hidden states", captured, rows_eager)]
            for layer, kv in written_kv(static.pool, static.slots[:rows]).items():
                compared.append((f"layer {layer}'s K/V at the rows' slots", captured_kv[layer], kv))
        if all(agrees(path, c, e, what=what) for what, c, e in compared):
            self.graphs.checked.add(static.rows)
            return None
        self.drop()
        return StepRun.of(layout, reference)

    def drop(self) -> None:
        """The fixed-shape decode off for good: every later step runs the eager cascade."""
        self.enabled = False
        self.graphs = None
        self.statics.clear()

    def _static(self, bucket: int, pool) -> StaticDecode:
        """The buffers of `bucket`, made anew (its graph dropped) when the pool was replaced."""
        static = self.statics.get(bucket)
        if (
            static is None
            or static.pool is not pool
            or static.kv_indices.shape[-1] != pool.num_blocks
        ):
            static = StaticDecode(
                bucket, pool, self.device, self.block_size, paged_tokens(self.runner)
            )
            self.statics[bucket] = static
            if self.graphs is not None:
                self.graphs.drop(bucket)
        return static
