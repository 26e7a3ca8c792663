"""A tiny run on a device whose KV pool is sized from free memory (CUDA's rule, its memory faked
on CPU): the byte sizes the pool is cut from, and the run settled the way `nudge run` settles it
(tests/splice/run/test_device_batching.py, test_cuda_stream_runs.py).

Tiny qwen3 (models/testing/tiny.py: 4 layers, hidden 64, MLP 128, 2 KV heads of 16, vocab 320)
in fp32: K and V of every layer per slot, and the activation margin of the engine's largest step
(2,048 prefill tokens, 512 rows, the largest decode bucket: engine/kv/kv_pool.py
`step_margin_bytes`, written out)."""

from __future__ import annotations

import math
from dataclasses import replace

from nudgeability.splice.run import runner
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.prepare import prepare
from nudgeability.splice.run.shape import settle

SLOT_BYTES = 4 * 2 * 2 * 16 * 4
MARGIN = 2 * (2048 * (6 * 64 + 4 * 128) * 4 + 512 * 320 * (4 + 8))


def free_for(blocks: int) -> int:
    """Free bytes whose default 0.9 share holds the margin and `blocks` blocks of 16 slots."""
    return math.ceil((MARGIN + (blocks + 0.5) * SLOT_BYTES * 16) / 0.9)


def tiny_config(model_dir, n: int) -> RunConfig:
    """StrategyQA's primary conditions at budgets 16,8 on `model_dir`, on CPU in float32 (what
    the pool holds is the subject, not the device's defaults: tests/splice/run/test_device_defaults.py)."""
    return RunConfig(
        model=str(model_dir),
        task="strategyqa",
        n=n,
        conditions=("primary",),
        max_new_tokens=16,
        max_new_tokens_arm=8,
        device="cpu",
        dtype="float32",
        static_decode=False,
    )


def settled(asked: RunConfig, out, *, with_schedule: bool = False, **changes):
    """(the built engine, the settled shape, the prepared run) of `asked` with `changes` in
    `out`, as `nudge run` does it: the engine built once, the shape settled on it first."""
    requested = replace(asked, **changes)
    built = runner.RunEngine(requested, "cpu")
    extra = {"schedule": built.schedule} if with_schedule else {}
    shape = settle(requested, "cpu", out, pool_rows=built.pool_rows, **extra)
    return built, shape, prepare(shape.config(requested), loaded=built.loaded)
