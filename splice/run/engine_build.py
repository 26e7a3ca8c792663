"""The run's engine: the one function that builds it from a run's config.

    engine = run_engine(model, tokenizer, config)

`nudge run` and `nudge verify` (runner.py `unit_context`), `nudge plan`'s measurement
(costs/estimate/run_estimate.py, through `unit_context`) and the GPU check (benchmarks/benchkit/gpu/)
all build their engine here, so that what the check measures is what a run computes with: the
engine's defaults for what the config does not set (block 16, 2,048 prefill tokens per step,
fused layer kernels on CUDA, graphs wherever the fixed-shape decode runs on CUDA, its buckets
captured at start, up to the row cap), the config's KV budget or, on CUDA, a pool sized from free memory, the
config's memory share and fixed-shape decode, and on CUDA the row cap from the pool
(device_batching.py `pool_rows`). `invariant` switches on the engine's batch-invariant CUDA
kernels (engine/invariant/cuda/), exactly where the run takes the stream on CUDA: shape.py
`settle` decides it once (schedule.py `choose_schedule`), and the CUDA needle's engine
(`needle_engine`) is this one's, on a small budget.
"""

from __future__ import annotations

from nudgeability.engine import Engine
from nudgeability.engine import engine as engine_module
from nudgeability.engine.invariant.cuda.mode import TRITON
from nudgeability.engine.invariant.cuda_needle import NEEDLE_ROWS, NEEDLE_SLOTS
from nudgeability.models.quant import triton_kernels
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.device_batching import pool_rows


def cuda_invariance_available() -> bool:
    """Whether the batch-invariant CUDA kernels can run here: they are Triton kernels, and
    Triton is the `gpu` extra's."""
    return triton_kernels.available()


def engine_options(config: RunConfig) -> dict:
    """The keyword arguments of the run's `Engine` that come from its config."""
    return {
        "max_batch_tokens": config.max_batch_tokens,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "static_decode": bool(config.static_decode),  # None, unresolved: the engine's own
    }


def pool_rows_of(engine: Engine, config: RunConfig) -> int:
    """The rows the engine's KV pool holds for this run's budgets (device_batching.py)."""
    slots = engine.pool.num_blocks * engine.block_size
    return pool_rows(slots, config.max_new_tokens, config.max_new_tokens_arm)


def run_engine(
    model, tokenizer, config: RunConfig, *, invariant: bool = False, **derived
) -> Engine:
    """The engine `nudge run` computes `config` with on `model` (module docstring); `invariant`:
    with its batch-invariant CUDA kernels (`Engine(invariance=TRITON)`).

    `derived`: Engine options that replace the run's, for a measurement that needs another (the
    GPU check's eager twin, or a row cap every timed row fits under); a run passes none. A
    `max_rows` given there stands; otherwise, where the pool is sized from memory (CUDA), the row
    cap is the rows the pool holds at the config's budgets."""
    options = {**engine_options(config), **derived}
    if invariant:
        options["invariance"] = TRITON
    engine = Engine(model, tokenizer, **options)
    if "max_rows" not in derived and engine_module.sizes_pool_from_memory(engine.runner.device):
        engine.limit_rows(pool_rows_of(engine, config))
    engine.capture()  # the buckets up to the row cap, now: start-up's cost, before any step
    return engine


def needle_options(config: RunConfig) -> dict:
    """The options of the CUDA needle's engine (`needle_engine`) that its answer depends on, as
    JSON values (engine/invariant/cuda_needle.py `cuda_key`): the run's, less the pool's sizing,
    on the needle's budget and row cap; the engine's own defaults are its code's."""
    options = {k: v for k, v in engine_options(config).items() if k != "gpu_memory_utilization"}
    return {**options, "max_batch_tokens": NEEDLE_SLOTS, "max_rows": NEEDLE_ROWS, "invariant": True}


def needle_engine(model, tokenizer, config: RunConfig) -> Engine:
    """The run's engine with its batch-invariant CUDA kernels (`run_engine`), on the CUDA
    needle's small KV budget and a row cap over the bucket 64 (`needle_options`)."""
    return run_engine(
        model,
        tokenizer,
        config,
        invariant=True,
        max_batch_tokens=NEEDLE_SLOTS,
        max_rows=NEEDLE_ROWS,
    )
