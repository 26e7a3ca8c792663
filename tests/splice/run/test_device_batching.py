"""`nudge run`'s rows on CUDA, and its chunk size when none is given, come from the KV pool's size
(splice/run/device_batching.py), not from a CPU-sized constant; and the pool's share of free
memory (`--gpu-memory-utilization`) reaches the engine. Checked on CPU with the engine's CUDA
sizing path faked: `sizes_pool_from_memory` answers True and `torch.cuda.mem_get_info` says how
much is free (as tests/engine/kv/test_pool_from_memory.py does), against hand computations."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from helpers.pool_sized_runs import MARGIN, SLOT_BYTES, free_for, settled, tiny_config
from helpers.tiny_runs import read_records

from nudgeability.engine import engine as engine_module
from nudgeability.models.testing.tiny import tiny_model
from nudgeability.splice.run import engine_build, runner
from nudgeability.splice.run.config import DEFAULT_CHUNK_SIZE, ConfigError, RunConfig
from nudgeability.splice.run.device_batching import (
    PROMPT_ALLOWANCE,
    pool_rows,
    row_slots,
    rows_for_pool,
)
from nudgeability.splice.run.prepare import prepare
from nudgeability.splice.rundir.store import ConfigChangedError

MiB = 2**20


def test_rows_for_pool_by_hand():
    # an H200-sized pool of 700,000 slots, rows of 1,024 + 256 + 128 slots: the bucket caps
    assert rows_for_pool(700_000, 1408, 256) == 256
    assert rows_for_pool(900_000, 1408, 512) == 512
    assert rows_for_pool(100_000, 1408, 256) == 71  # 100,000 // 1,408
    assert rows_for_pool(500, 1408, 256) == 1
    assert row_slots(256, 128) == PROMPT_ALLOWANCE + 384
    with pytest.raises(ValueError):
        rows_for_pool(0, 1408, 256)


def test_pool_rows_by_hand():
    """The rows cap and the default CUDA chunk size: pool slots // (1,024 + the two budgets), at
    most 512 (the largest default decode bucket), at least 1."""
    assert pool_rows(100_000, 256, 128) == 71  # 100,000 // 1,408
    assert pool_rows(700_000, 256, 128) == 497  # 700,000 // 1,408, under the bucket
    assert pool_rows(900_000, 256, 128) == 512  # 639 rows fit; the bucket caps
    assert pool_rows(3_000, 16, 8) == 2  # 3,000 // 1,048
    assert pool_rows(1_000, 16, 8) == 1  # not one whole row: still one
    # Qwen3-8B in bf16 (36 layers x K and V x 8 KV heads of 128 x 2 bytes = 147,456 bytes a
    # slot) with 120 GiB free: 0.9 of it is 786,432 slots, 109 rows of 1,024 + 4,096 + 2,048.
    # A 32-problem unit is 32 rows, not a CPU-sized constant's
    slots = 120 * 2**30 * 9 // 10 // (36 * 2 * 8 * 128 * 2)
    assert slots == 786_432 and pool_rows(slots, 4096, 2048) == 109


@pytest.fixture
def fake_cuda(monkeypatch):
    """The engine takes the CUDA sizing path on CPU with `fake_cuda.free` bytes free."""
    monkeypatch.setattr(engine_module, "sizes_pool_from_memory", lambda device: True)
    monkeypatch.setattr(
        torch.cuda, "mem_get_info", lambda device=None: (fake_cuda.free, 80 * 2**30)
    )
    fake_cuda.free = 64 * MiB
    return fake_cuda


def _prepared(config: RunConfig) -> SimpleNamespace:
    loaded = SimpleNamespace(model=tiny_model("qwen3", num_layers=4), tokenizer=None)
    return SimpleNamespace(backend=None, loaded=loaded, config=config)


def test_the_runner_caps_rows_from_the_pool_on_cuda(fake_cuda):
    config = RunConfig(max_new_tokens=256, max_new_tokens_arm=128)
    engine = runner.unit_context(_prepared(config), progress=False).backend.engine
    slots = engine.pool.num_blocks * engine.block_size
    assert engine.max_rows == min(512, slots // (PROMPT_ALLOWANCE + 384))
    assert engine.scheduler.max_rows == engine.max_rows


def test_the_memory_share_reaches_the_engine(fake_cuda):
    """`RunConfig.gpu_memory_utilization` is an engine option of the run, and on CUDA it sizes
    the pool: 0.5 of 64 MiB less the margin, in blocks of 16 slots (by hand: 912 blocks,
    14,592 slots, 10 rows of 1,408), where the default 0.9 gives 2,550 blocks and 28 rows."""
    assert engine_build.engine_options(RunConfig(gpu_memory_utilization=0.5)) == {
        "max_batch_tokens": None,
        "gpu_memory_utilization": 0.5,
        "static_decode": False,
    }
    assert engine_build.engine_options(RunConfig(max_batch_tokens=4096)) == {
        "max_batch_tokens": 4096,
        "gpu_memory_utilization": None,
        "static_decode": False,
    }
    budgets = {"max_new_tokens": 256, "max_new_tokens_arm": 128}
    half = runner.unit_context(
        _prepared(RunConfig(gpu_memory_utilization=0.5, **budgets)), progress=False
    ).backend.engine
    assert half.gpu_memory_utilization == 0.5
    assert half.pool.num_blocks == (int(0.5 * 64 * MiB) - MARGIN) // (SLOT_BYTES * 16) == 912
    assert half.max_rows == 912 * 16 // 1408 == 10
    default = runner.unit_context(_prepared(RunConfig(**budgets)), progress=False).backend.engine
    assert default.pool.num_blocks == (int(0.9 * 64 * MiB) - MARGIN) // (SLOT_BYTES * 16) == 2550
    assert default.max_rows == 2550 * 16 // 1408 == 28


def _chunk_size(out) -> int:
    return json.loads((out / "manifest.json").read_text())["config"]["chunk_size"]


def _parts(out) -> list[str]:
    return sorted(p.name for p in (out / "parts").glob("*.jsonl"))


def test_a_cuda_run_takes_its_chunk_size_from_the_pool_once(
    fake_cuda, tiny_checkpoint, tmp_path, monkeypatch
):
    """No chunk size on CUDA: a fresh run cuts its problems into chunks of the rows its pool holds
    (the engine's row cap too) and records it; a resume on a machine whose pool holds more keeps
    the recorded chunks, and an explicit other chunk size is the resume's config error. As
    `nudge run` does it: the shape settled first (splice/run/shape.py) on the engine the run
    then computes on, built once. Each unit is one engine call, as on CUDA
    (`schedule="units"`). Budgets 16,8: a row is 1,024 + 24 = 1,048 slots; 100 blocks (1,600
    slots) hold one row, 150 blocks (2,400 slots) two."""
    model_dir = tiny_checkpoint("qwen3", close_boost=2.6)
    engines = []
    make_engine = engine_build.Engine

    def engine(*args, **kwargs):  # every engine the run builds
        engines.append(make_engine(*args, **kwargs))
        return engines[-1]

    monkeypatch.setattr(engine_build, "Engine", engine)
    asked = tiny_config(model_dir, n=3)

    def run(out, **changes):
        built, _, prepared = settled(asked, out, **changes)
        built_before = len(engines)
        result = runner.run(prepared, out, progress=False, schedule="units", engine=built.engine)
        assert len(engines) == built_before and engines[-1] is built.engine  # no second engine
        return result

    fake_cuda.free = free_for(100)
    with pytest.raises(ConfigError, match="--chunk-size: a run on cpu takes it from its engine"):
        prepare(asked)  # the pool's rows are the shape's to settle
    result = run(tmp_path / "small")
    assert len(engines) == 1
    assert engines[-1].pool.num_blocks == 100 and engines[-1].max_rows == 1
    assert _chunk_size(tmp_path / "small") == 1 and result.units_computed == 9  # 3 phases x 3
    assert [p for p in _parts(tmp_path / "small") if p.startswith("NT")] == [
        "NT-s0-c00000.jsonl", "NT-s0-c00001.jsonl", "NT-s0-c00002.jsonl"
    ]  # fmt: skip

    fake_cuda.free = free_for(150)  # a fresh run on a larger pool: chunks of two
    run(tmp_path / "large")
    assert engines[-1].pool.num_blocks == 150 and engines[-1].max_rows == 2
    assert _chunk_size(tmp_path / "large") == 2

    # the small run, killed before its last unit and its records, resumed on the larger pool
    small = tmp_path / "small"
    before, parts = (small / "records.jsonl").read_bytes(), _parts(small)
    (small / "records.jsonl").unlink()
    (small / "parts" / parts[-1]).unlink()
    result = run(small)
    assert (result.units_computed, result.units_resumed) == (1, 8)
    assert _chunk_size(small) == 1 and _parts(small) == parts
    assert (small / "records.jsonl").read_bytes() == before
    assert len(read_records(small)) == len(read_records(tmp_path / "large"))

    with pytest.raises(ConfigChangedError, match=r"config\.chunk_size: stored 1, now 2"):
        run(small, chunk_size=2)


def test_the_cpu_default_chunk_size_is_unchanged(tiny_checkpoint):
    """Off CUDA the default is the fixed one, resolved by `prepare` with the plan, as before."""
    model_dir = tiny_checkpoint("qwen3")
    prepared = prepare(RunConfig(model=str(model_dir), task="strategyqa", n=2, device="cpu"))
    assert prepared.config.chunk_size == DEFAULT_CHUNK_SIZE == 32
    assert prepared.manifest["config"]["chunk_size"] == 32 and prepared.plan.chunk_size == 32


def test_the_fixed_shape_decode_reaches_the_run_s_engine(fake_cuda):
    """`--static-decode` (RunConfig.static_decode) is the engine's `static_decode`: the run's
    engine decodes on fixed shapes (with CUDA graphs where the model is on CUDA)."""
    on = runner.unit_context(_prepared(RunConfig(static_decode=True)), progress=False)
    off = runner.unit_context(_prepared(RunConfig()), progress=False)
    assert on.backend.engine.static_decode is True
    assert off.backend.engine.static_decode is False
