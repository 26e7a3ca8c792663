"""`nudge run`'s rows on CUDA come from the KV pool's size (splice/run/device_batching.py), not
from a CPU-sized constant; checked with the engine's CUDA sizing path faked on CPU."""

from __future__ import annotations

import pytest
import torch

from nudgeability.engine import engine as engine_module
from nudgeability.splice.run import runner
from nudgeability.splice.run.device_batching import PROMPT_ALLOWANCE, row_slots, rows_for_pool


def test_rows_for_pool_by_hand():
    # an H200-sized pool of 700,000 slots, rows of 1,024 + 256 + 128 slots: the bucket caps
    assert rows_for_pool(700_000, 1408, 256) == 256
    assert rows_for_pool(100_000, 1408, 256) == 71  # 100,000 // 1,408
    assert rows_for_pool(500, 1408, 256) == 1
    assert row_slots(256, 128) == PROMPT_ALLOWANCE + 384
    with pytest.raises(ValueError):
        rows_for_pool(0, 1408, 256)


def test_the_runner_caps_rows_from_the_pool_on_cuda(monkeypatch):
    from types import SimpleNamespace

    from nudgeability.models.testing.tiny import tiny_model

    monkeypatch.setattr(engine_module, "sizes_pool_from_memory", lambda device: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (64 * 2**20, 80 * 2**30))
    config = SimpleNamespace(max_batch_tokens=None, max_new_tokens=256, max_new_tokens_arm=128)
    loaded = SimpleNamespace(model=tiny_model("qwen3", num_layers=4), tokenizer=None)
    prepared = SimpleNamespace(backend=None, loaded=loaded, config=config)
    engine = runner.unit_context(prepared, progress=False).backend.engine
    slots = engine.pool.num_blocks * engine.block_size
    assert engine.max_rows == min(256, slots // (PROMPT_ALLOWANCE + 384))
    assert engine.scheduler.max_rows == engine.max_rows
