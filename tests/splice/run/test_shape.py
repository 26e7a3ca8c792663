"""A run's shape is settled by one function (splice/run/shape.py `settle`): the chunk size in its
order of precedence, the worker count, the row cap on a pool-sized device, the manifest read at
most once; and `nudge run`, `nudge plan` and the GPU check's plan section each call it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from helpers.tiny_runs import nudge_run_args, run_nudge

from nudgeability.splice.run import shape as shape_module
from nudgeability.splice.run.config import DEFAULT_CHUNK_SIZE, SERVER, RunConfig
from nudgeability.splice.run.shape import settle

CPU = RunConfig(model="m", task="strategyqa", n=8, device="cpu")


def _manifest(out, chunk_size) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").write_text(json.dumps({"config": {"chunk_size": chunk_size}}))


@pytest.fixture
def reads(monkeypatch):
    """The manifests `settle` reads, by directory."""
    seen = []
    real = shape_module.read_manifest
    monkeypatch.setattr(shape_module, "read_manifest", lambda out: seen.append(out) or real(out))
    return seen


def test_the_chunk_size_asked_then_resumed_then_workers_then_default(tmp_path, reads):
    fresh, resumed = tmp_path / "fresh", tmp_path / "resumed"
    _manifest(resumed, 3)
    one = settle(CPU, "cpu", fresh, workers=1)
    assert (one.workers, one.chunk_size, one.chunk_from, one.max_rows) == (
        1, DEFAULT_CHUNK_SIZE, "default", None
    )  # fmt: skip
    # four workers on 8 problems: two chunks each, of one problem (workers.py)
    four = settle(CPU, "cpu", fresh, workers=4)
    assert (four.workers, four.chunk_size, four.chunk_from) == (4, 1, "workers")
    back = settle(CPU, "cpu", resumed, workers=1)
    assert (back.chunk_size, back.chunk_from) == (3, "resumed")
    asked = settle(replace(CPU, chunk_size=5), "cpu", resumed, workers=1)
    assert (asked.chunk_size, asked.chunk_from) == (5, "asked")
    assert reads == [resumed, resumed]  # once per settle, only where a manifest is
    assert settle(CPU, "cpu", None, workers=1).chunk_from == "default"  # no directory at all
    assert asked.config(CPU).chunk_size == 5


def test_a_pool_sized_device_takes_its_rows_once(tmp_path, monkeypatch, reads):
    """Where the KV pool is sized from free memory (CUDA, faked here), the engine's rows are the
    row cap always and the chunk size when none is asked for or recorded; `pool_rows` is called
    once, and never for a server or a CPU."""
    calls = []

    def rows() -> int:
        calls.append(1)
        return 12

    monkeypatch.setattr(shape_module, "batches_from_pool", lambda device: device == "cuda")
    fresh = settle(CPU, "cuda", tmp_path / "fresh", pool_rows=rows)
    assert (fresh.workers, fresh.chunk_size, fresh.chunk_from, fresh.max_rows) == (
        1, 12, "pool", 12
    )  # fmt: skip
    _manifest(tmp_path / "resumed", 4)
    resumed = settle(CPU, "cuda", tmp_path / "resumed", pool_rows=rows)
    assert (resumed.chunk_size, resumed.chunk_from, resumed.max_rows) == (4, "resumed", 12)
    assert len(calls) == 2 and reads == [tmp_path / "resumed"]
    assert settle(CPU, "cpu", None, workers=1, pool_rows=rows).max_rows is None
    remote = settle(CPU, SERVER, None, remote=True, pool_rows=rows)
    assert (remote.workers, remote.chunk_from, remote.max_rows) == (1, "default", None)
    assert len(calls) == 2
    with pytest.raises(ValueError, match="row cap from its engine's KV pool"):
        settle(CPU, "cuda", None)


def test_bad_worker_counts_are_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"^--workers 0: must be at least 1$"):
        settle(CPU, "cpu", tmp_path, workers=0)
    with pytest.raises(ValueError, match="a run on a server is one process"):
        settle(CPU, SERVER, tmp_path, workers=2, remote=True)


@pytest.fixture
def settled(monkeypatch):
    """Every call of `settle`, through the module attribute each entry looks up: (device, out,
    the shape returned)."""
    calls = []
    real = shape_module.settle

    def recording(config, device, out, **kwargs):
        calls.append((device, out, real(config, device, out, **kwargs)))
        return calls[-1][2]

    monkeypatch.setattr(shape_module, "settle", recording)
    return calls


def test_nudge_run_settles_its_shape_once(tiny_checkpoint, tmp_path, settled):
    model = tiny_checkpoint("qwen3", close_boost=2.6)
    out = tmp_path / "run"
    status, err = run_nudge(nudge_run_args(model, out, n=2, chunk_size=1, device="cpu"))
    assert status == 0, err
    assert [(device, str(where)) for device, where, _ in settled] == [("cpu", str(out))]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["chunk_size"] == settled[0][2].chunk_size == 1


def test_nudge_plan_settles_its_shape_once(tiny_checkpoint, settled, capsys):
    from nudgeability.cli import main

    model = tiny_checkpoint("qwen3", close_boost=2.6)
    argv = ["plan", "--model", str(model), "--task", "strategyqa", "--n", "2"]
    argv += ["--max-new-tokens", "8,4", "--device", "cpu", "--workers", "1", "--json"]
    assert main(argv) == 0
    assert [(device, where) for device, where, _ in settled] == [("cpu", None)]
    assert json.loads(capsys.readouterr().out)["workers"] == settled[0][2].workers == 1


def test_the_gpu_check_plans_through_the_same_shape(settled):
    """The GPU check's plan section (benchmarks/benchkit/gpu/plan.py), dry, on its CPU stand-in."""
    from benchkit.gpu import engine as gpu_engine
    from benchkit.gpu import plan as gpu_plan

    rows = gpu_plan.plan(gpu_engine._dry_model(), gpu_engine.DRY_SIZES, dry_run=True)
    assert [(device, where) for device, where, _ in settled] == [("cpu", None)]
    assert not any("failed" in str(value) for _, value in rows), rows
