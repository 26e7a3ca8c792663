"""The schedule's decision table (splice/run/schedule.py `decide`) over the device, the dtype, the
model family, the checkpoint format and the needle's answer: the decision code runs as it is,
with stand-ins only for what this machine lacks (whether Triton imports for the invariant CUDA
kernels, the needle's answer on a GPU); and on a pool-sized device (CUDA, faked) the
shape settles the schedule before the engine is built, the stream takes no chunk size from the
pool, and the manifest says what each process took."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from nudgeability.engine.invariant.needle import InvarianceCheck
from nudgeability.models.testing.tiny import tiny_model
from nudgeability.splice.run import engine_build
from nudgeability.splice.run import shape as shape_module
from nudgeability.splice.run.config import DEFAULT_CHUNK_SIZE, RunConfig
from nudgeability.splice.run.schedule import STREAM, UNITS, Schedule, decide
from nudgeability.splice.run.shape import settle

HELD = InvarianceCheck(True, 1, (16, 17, "split"), (), 0.0, device="NVIDIA H100")
FAILED = InvarianceCheck(False, 1, (16, 17, "split"), (17, "split"), 0.0, device="NVIDIA H100")


@pytest.fixture
def kernels(monkeypatch):
    """Whether the batch-invariant CUDA kernels can run (Triton imports); they can by default."""

    def have(present: bool) -> None:
        monkeypatch.setattr(engine_build, "cuda_invariance_available", lambda: present)

    have(True)
    return have


def _bnb(model):
    model.config.quantization_config = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    return model


def test_the_decision_table(kernels):
    qwen, gemma = tiny_model("qwen3", num_layers=1), tiny_model("gemma4")
    cuda = RunConfig(device="cuda", dtype="bfloat16")
    asked_needle = []

    def needle(answer):
        return lambda: asked_needle.append(answer) or answer

    rows = [
        # (config, model, server, needle's answer, schedule, words of its why)
        (cuda, qwen, False, HELD, STREAM, "held on this GPU"),
        (cuda, qwen, False, FAILED, UNITS, "differed among 17, split prompts on this GPU"),
        (replace(cuda, dtype="float16"), qwen, False, HELD, UNITS, "compute in bfloat16"),
        (replace(cuda, dtype="float32"), qwen, False, HELD, UNITS, "compute in bfloat16"),
        (cuda, gemma, False, HELD, UNITS, "gemma4_text: sliding-window layers"),
        (cuda, _bnb(tiny_model("qwen3", num_layers=1)), False, HELD, UNITS, "bitsandbytes"),
        (cuda, qwen, True, HELD, UNITS, "a server"),
        (replace(cuda, device="cuda:1"), qwen, False, HELD, STREAM, "held on this GPU"),
        (RunConfig(device="mps", dtype="float32"), qwen, False, HELD, UNITS, "mps: no batch"),
        (RunConfig(device="cpu", dtype="bfloat16"), qwen, False, HELD, UNITS, "float32 only"),
        (RunConfig(device="cpu", dtype="float32"), qwen, False, HELD, STREAM, "this machine"),
        (RunConfig(device="cpu", dtype="float32"), qwen, False, FAILED, UNITS, "this machine"),
    ]
    for config, model, server, answer, name, why in rows:
        asked_needle.clear()
        chosen = decide(config, model, server=server, check=needle(answer))
        assert (chosen.name, why in chosen.why) == (name, True), (config, chosen)
        # the needle is asked only where it decides, and its answer is then recorded
        measured = "needle" in chosen.why
        assert bool(asked_needle) == measured and (chosen.invariance is answer) == measured
    assert "head size" not in decide(cuda, qwen, check=needle(HELD)).why
    gemma.config.global_head_dim = 512  # Gemma 4's full layers
    assert "head size 512" in decide(cuda, gemma, check=needle(HELD)).why
    kernels(False)
    chosen = decide(cuda, qwen, check=needle(HELD))
    assert chosen.name == UNITS and "no batch-invariant CUDA kernels" in chosen.why
    assert decide(cuda, qwen, asked=STREAM).why == "asked for"
    with pytest.raises(ValueError, match="'stream' or 'units'"):
        decide(cuda, qwen, asked="fast")


def test_the_schedule_and_its_needle_round_trip_through_the_manifest():
    for schedule in (
        Schedule(STREAM, "the needle held on this GPU", HELD),
        Schedule(UNITS, "the needle's logits differed", FAILED),
        Schedule(UNITS, "a server"),
    ):
        text = json.loads(json.dumps(schedule.to_manifest()))
        check = text.get("invariance")
        back = Schedule(
            text["name"],
            text["why"],
            None if check is None else InvarianceCheck.from_manifest(check),
        )
        assert back.to_manifest() == schedule.to_manifest()
        if check is not None:
            assert back.invariance.differing == schedule.invariance.differing
    # a CPU needle's entry has no device: the CPU manifest is as it was
    cpu = InvarianceCheck(True, 2, (2, 5), (), 0.0)
    assert cpu.to_manifest() == {"holds": True, "threads": 2, "batches": [2, 5], "differing": []}


def test_on_cuda_the_shape_settles_the_schedule_before_the_engine(tmp_path, monkeypatch):
    """The stream takes no chunk size from the pool: a fresh run the default, a resume the
    recorded one (its parts are cut by it), each its own pool's row cap; by unit, today's rule
    (the pool's rows at a fresh start). `schedule` is called before `pool_rows`, once."""
    monkeypatch.setattr(shape_module, "batches_from_pool", lambda device: device == "cuda")
    calls = []

    def source(name: str, rows: int):
        def schedule():
            calls.append("schedule")
            return Schedule(name, "stand-in")

        def pool_rows():
            calls.append("rows")
            return rows

        return schedule, pool_rows

    config = RunConfig(model="m", task="strategyqa", n=8, device="cuda")
    schedule, rows = source(STREAM, 12)
    fresh = settle(config, "cuda", tmp_path / "a", schedule=schedule, pool_rows=rows)
    assert calls == ["schedule", "rows"] and fresh.schedule.name == STREAM
    assert (fresh.chunk_size, fresh.chunk_from, fresh.max_rows) == (
        DEFAULT_CHUNK_SIZE,
        "default",
        12,
    )
    assert fresh.to_manifest() == {
        "chunk_size": DEFAULT_CHUNK_SIZE,
        "chunk_from": "default",
        "rows": 12,
    }
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "manifest.json").write_text(json.dumps({"config": {"chunk_size": 7}}))
    schedule, rows = source(STREAM, 30)  # resumed on a card with more free memory
    resumed = settle(config, "cuda", tmp_path / "b", schedule=schedule, pool_rows=rows)
    assert (resumed.chunk_size, resumed.chunk_from, resumed.max_rows) == (7, "resumed", 30)
    schedule, rows = source(UNITS, 12)
    by_unit = settle(config, "cuda", tmp_path / "a", schedule=schedule, pool_rows=rows)
    assert (by_unit.chunk_size, by_unit.chunk_from, by_unit.max_rows) == (12, "pool", 12)
    assert settle(config, "cpu", None, workers=1, schedule=schedule).schedule is None
