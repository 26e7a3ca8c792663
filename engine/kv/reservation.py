"""How many blocks the engine's KV pool gets, and how many a submitted request may come to hold.

`memory_pool` sizes a pool from the device's free memory (CUDA with no `max_batch_tokens`:
`kv_pool.pool_blocks_for`, less a margin for what the engine allocates after the pool).

The pool is sized before the CUDA graphs are captured, not after: a graph replays on the
addresses it captured, the pool's K/V among them, so the pool must exist first. The margin
therefore counts what comes after it: the largest step's activations
(`kv_pool.step_margin_bytes`), the graphs' private memory pool (the same bound for the largest
bucket's step, forward and LM head, which no eager step can reuse), and the quantised
self-check's float64 temporaries (`check_margin_bytes`). The fixed-shape decode's per-slot owner
tables (two int64 per slot and bucket, static_decode.py) are left to the share of free memory the
pool does not take: under 0.1% of a slot's K/V for any model the paper runs.
`request_blocks` is what `Engine.submit_fork` (engine/engine.py `_reserve`) reserves for a
request's groups: it refuses a group that could never run under the budget, and otherwise counts
the blocks the request could hold at once, by which an engine with no budget grows its pool.
"""

from __future__ import annotations

import torch

from nudgeability.engine.errors import EngineInputError
from nudgeability.engine.kv.kv_pool import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    KVPool,
    free_device_bytes,
    pool_blocks_for,
    step_margin_bytes,
)
from nudgeability.engine.kv.layers import activation_dtype, layer_kv_widths
from nudgeability.engine.scheduling.group_shape import GroupShape
from nudgeability.engine.sequence import Group, sources

# (layer index, kv heads, head size, dtype) of a layer that stores KV: `KVPool.allocate`'s input
LayerSpec = tuple[int, int, int, torch.dtype]


def sizes_pool_from_memory(device: torch.device) -> bool:
    """Whether an engine with no `max_batch_tokens` on `device` sizes its pool from free memory
    (CUDA) rather than growing it with the work (CPU, where untouched pages cost nothing)."""
    return device.type == "cuda"


def memory_pool(
    runner,
    *,
    vocab_size: int,
    prefill_tokens: int,
    rows: int,
    block_size: int,
    fraction: float | None,
    decode=None,
) -> tuple[int, list[LayerSpec]]:
    """The pool's blocks from free device memory (`kv_pool.pool_blocks_for`; `fraction` None
    takes the default share), and the `LayerSpec` of every layer that stores KV, to allocate at
    once. `rows` is the most rows one step's LM head takes; `runner` a `model_runner.ModelRunner`;
    `decode` the engine's `static_dispatch.StaticDecodeDispatch`, whose graphs, if on, capture
    its buckets up to the largest (module docstring)."""
    model = runner.model
    dtype = activation_dtype(model)
    size = dtype.itemsize
    layers = []
    for i, (layer, (width, _, stores)) in enumerate(
        zip(runner.decoder.layers, layer_kv_widths(model))
    ):
        if stores:
            d = layer.self_attn.head_dim
            layers.append((i, width // 2 // d, d, dtype))
    slot_bytes = sum(2 * kv * d for _, kv, d, _ in layers) * size
    linears = [m.out_features for m in runner.decoder.modules() if hasattr(m, "out_features")]
    hidden, widest = model.config.get_text_config().hidden_size, max(linears, default=0)
    margin = step_margin_bytes(hidden, widest, vocab_size, prefill_tokens, rows, size)
    graphed = 0 if decode is None or decode.graphs is None else decode.buckets[-1]
    if graphed:
        margin += step_margin_bytes(hidden, widest, vocab_size, graphed, graphed, size)
    margin += check_margin_bytes(runner.decoder, max(prefill_tokens, rows, graphed), size)
    try:
        blocks = pool_blocks_for(
            free_device_bytes(runner.device),
            slot_bytes,
            block_size,
            fraction or DEFAULT_GPU_MEMORY_UTILIZATION,
            margin,
        )
    except ValueError as exc:
        raise EngineInputError(str(exc)) from None
    if blocks < 4:
        raise EngineInputError(f"free device memory holds only {blocks} KV blocks")
    return blocks, layers


def check_margin_bytes(decoder, rows: int, element_size: int) -> int:
    """A bound on the quantised self-check's temporaries (models/quant/self_check.py
    `disagreement`, run once per kernel before the run on CUDA) for the quantised linear of
    `decoder` on a fused path that needs the most: its exact weight [N, K] in the model dtype and
    twice in float64 (W and its magnitudes), the input [rows, K] twice in float64, and seven
    [rows, N] float64 tensors (the reference, the magnitudes' product, the bound, the error and
    their temporaries). 0 where no layer is quantised on a fused path (nothing is checked)."""
    from nudgeability.models.quant.compute import QuantLinearBase

    shapes = {
        (m.out_features, m.in_features)
        for m in decoder.modules()
        if isinstance(m, QuantLinearBase) and m.fused is not None
    }
    return max(
        (n * k * (element_size + 16) + rows * (2 * k + 7 * n) * 8 for n, k in shapes), default=0
    )


def request_blocks(
    groups: list[Group], pool: KVPool, max_batch_tokens: int | None, pool_blocks: int
) -> int:
    """The blocks a request's `groups` could hold at once: their own runs and stems, every row's
    whole budget, and the runs they read from other sequences. EngineInputError when one group
    alone could never fit a `max_batch_tokens` budget (a pool of `pool_blocks`)."""
    total = 0
    for group in groups:
        runs = [s for s in group.segments if s.start is None and (s is group.own)]
        stem_runs = [r.stem for r in group.rows if r.stem is not None]
        prefix = sum(pool.blocks_for(s.length) for s in runs + stem_runs)
        arms = [
            pool.blocks_for(len(r.suffix_ids) + r.params.max_new_tokens - 1)
            for r in group.rows
            if r.stem is None
        ]
        least = prefix + max(arms, default=0)
        if max_batch_tokens is not None and least > pool_blocks - 1:
            shape = GroupShape(group.prefix_len, tuple(len(r.suffix_ids) for r in group.rows), ())
            raise EngineInputError(
                f"one prefix group needs {least * pool.block_size} KV token slots (prefix "
                f"{shape.prefix}, {len(group.rows)} arms) but max_batch_tokens is "
                f"{max_batch_tokens}; raise the budget"
            )
        # a run read from another sequence (a reused base, a live trunk: all of it, once, however
        # few of its tokens the group reads) stays while this group reads it
        total += prefix + sum(arms)
        total += sum(
            pool.blocks_for(r.length) for r in sources(group.segments) if r.start is not None
        )
    return total
