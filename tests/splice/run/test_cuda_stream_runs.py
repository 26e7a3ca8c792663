"""A run on a pool-sized device (CUDA, its memory faked on CPU) whose engine has batch-invariant
kernels: the shape settles the stream with the CUDA needle on the run's engine options, the
engine is built with its invariant kernels exactly then, the stream's records are by-unit's
byte for byte, and a resume on a card with another amount of free memory takes that card's row
cap and gives the same bytes; the manifest says which chunk size and row cap each process took.

The CPU engine is batch-invariant by construction in float32 (engine/invariant/cpu/), so it
stands in for the CUDA kernels: the stand-ins are the device (its free memory, its properties,
the kernels' dtype) and the engine keyword that switches the kernels on, which the CPU engine
takes and records (engine_build.py `run_engine`'s `invariant`)."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import pytest
import torch
from helpers.pool_sized_runs import free_for, settled, tiny_config

from nudgeability.engine import engine as engine_module
from nudgeability.splice.run import engine_build, runner, schedule
from nudgeability.splice.run.config import DEFAULT_CHUNK_SIZE


@pytest.fixture
def gpu(monkeypatch, tmp_path):
    """The CUDA pool sizing on CPU with `gpu.free` bytes free, a device's properties for the
    needle's key, kernels computing in float32 here; every engine built, with whether its
    invariant kernels were asked for."""
    monkeypatch.setenv("NUDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(engine_module, "sizes_pool_from_memory", lambda device: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (gpu.free, 80 * 2**30))
    props = SimpleNamespace(name="NVIDIA H100", major=9, minor=0, multi_processor_count=132)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    monkeypatch.setattr(schedule, "CUDA_DTYPE", "float32")
    real = engine_build.Engine

    def engine(*args, invariance: str | None = None, **kwargs):
        built = real(*args, **kwargs)
        gpu.engines.append((built, invariance == "triton"))
        return built

    monkeypatch.setattr(engine_build, "Engine", engine)
    gpu.engines, gpu.free = [], free_for(200)
    return gpu


def _md5(out) -> str:
    return hashlib.md5((out / "records.jsonl").read_bytes()).hexdigest()


def _entry(out) -> dict:
    return json.loads((out / "manifest.json").read_text())["schedule"]


def test_the_stream_on_cuda_is_by_unit_s_bytes_on_any_pool(gpu, tiny_checkpoint, tmp_path):
    asked = tiny_config(tiny_checkpoint("qwen3", close_boost=2.6), n=2)

    def start(out, **changes):
        return settled(asked, out, with_schedule=True, **changes)

    built, shape, prepared = start(tmp_path / "stream")
    # the needle's engine, then the run's: both with the invariant kernels, the needle's small
    assert [(e.max_rows, on) for e, on in gpu.engines] == [(65, True), (shape.max_rows, True)]
    assert shape.schedule.name == "stream" and shape.schedule.invariance.holds
    assert (shape.chunk_size, shape.chunk_from) == (DEFAULT_CHUNK_SIZE, "default")
    runner.run(prepared, tmp_path / "stream", progress=False, engine=built.engine, shape=shape)
    runner.run(prepared, tmp_path / "units", progress=False, schedule="units", engine=built.engine)
    assert _md5(tmp_path / "stream") == _md5(tmp_path / "units")
    entry = _entry(tmp_path / "stream")
    assert entry["name"] == "stream" and entry["invariance"]["device"] == "cpu"
    assert entry["shape"] == {"chunk_size": 32, "chunk_from": "default", "rows": shape.max_rows}

    # killed before its records, resumed on a card with less free memory: fewer rows per step
    first = shape.max_rows
    stream = tmp_path / "stream"
    before = (stream / "records.jsonl").read_bytes()
    (stream / "records.jsonl").unlink()
    for part in sorted((stream / "parts").glob("arms-*.jsonl")):
        part.unlink()
    gpu.free = free_for(120)
    built, shape, prepared = start(stream)
    assert shape.max_rows < first and shape.chunk_from == "resumed"
    result = runner.run(prepared, stream, progress=False, engine=built.engine, shape=shape)
    assert result.units_computed >= 1
    assert (stream / "records.jsonl").read_bytes() == before
    assert _entry(stream)["shape"]["rows"] == shape.max_rows

    # by unit on CUDA (a model the kernels do not cover): today's engine and chunk rule
    gpu.engines.clear()
    built, shape, prepared = start(tmp_path / "float16", dtype="float16")
    assert shape.schedule.name == "units" and "compute in float32" in shape.schedule.why
    assert [on for _, on in gpu.engines] == [False] and shape.chunk_from == "pool"
