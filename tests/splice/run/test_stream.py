"""The streamed schedule (splice/run/stream.py) against the units schedule it replaces: every file
a run writes is byte for byte the same, at any chunk size or KV budget, while the arms really
start before their bases finish, forked from the bases' own caches."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from helpers.smollm2_streamed import SMOLLM2_STREAMED

import nudgeability.splice.run.parts as parts_module
import nudgeability.splice.run.schedule as schedule_module
import nudgeability.splice.run.stream as stream_module
import nudgeability.splice.run.stream_jobs as jobs_module
from nudgeability.engine.invariant.needle import InvarianceCheck
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.prepare import prepare
from nudgeability.splice.run.runner import run
from nudgeability.splice.run.schedule import choose_schedule
from nudgeability.splice.run.stream import Stream
from nudgeability.splice.rundir.records import Record

TINY = dict(task="strategyqa", max_new_tokens=16, max_new_tokens_arm=8, device="cpu")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """One torch thread for the test (restored after); the engine's forward is single-threaded
    whatever the setting (engine/invariant/cpu/products.py), so this only keeps the test's own work light."""


def _files(out: Path, parts: bool = True) -> dict[str, str]:
    """sha256 of the records, the resolutions and (with `parts`) every part and side file."""
    names = [out / "records.jsonl", out / "resolutions.jsonl"]
    if parts:
        names += sorted((out / "parts").glob("*")) + sorted((out / "signals").glob("*"))
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in names
        if p.exists()
    }


def _run(model, out: Path, schedule: str, **config) -> dict[str, str]:
    prepared = prepare(RunConfig(model=str(model), **{**TINY, **config}))
    result = run(prepared, out, progress=False, schedule=schedule)
    assert result.units_computed == len(prepared.plan.units())
    return _files(out)


@pytest.mark.parametrize(
    "config",
    [
        dict(n=6, chunk_size=2, conditions=("all",), consistency_samples=2),  # signals on
        dict(n=4, chunk_size=3, decoding="sampled", seeds=(0, 1), conditions=("primary",)),
    ],
    ids=["greedy-all-signals", "sampled-two-seeds"],
)
def test_the_stream_writes_every_file_of_the_units_schedule(tiny_checkpoint, tmp_path, config):
    model = tiny_checkpoint("qwen3", close_boost=2.6)
    units = _run(model, tmp_path / "units", "units", **config)
    streamed = _run(model, tmp_path / "stream", "stream", **config)
    assert streamed == units
    assert any(name.startswith("parts/arms") for name in units)


def test_jobs_pass_typed_records_and_read_stored_parts_as_the_units_do(
    tiny_checkpoint, tmp_path, monkeypatch
):
    """A fresh stream parses no record: its jobs hand each other `Record`s (no JSON line in
    between, stream_jobs.py); resumed, the parts its jobs build on are read by the units
    schedule's own reader (parts.py `stored_records`), once per part."""
    model = tiny_checkpoint("qwen3", close_boost=2.6)
    config = dict(n=4, chunk_size=2, conditions=("primary", "oracle"))
    parsed, read = [], []
    real_from_dict, real_stored = Record.from_dict.__func__, parts_module.stored_records

    def from_dict(cls, data, **kwargs):
        parsed.append(data["condition"])
        return real_from_dict(cls, data, **kwargs)

    def stored_records(store, unit):
        read.append(unit.name)
        return real_stored(store, unit)

    monkeypatch.setattr(Record, "from_dict", classmethod(from_dict))
    monkeypatch.setattr(jobs_module, "stored_records", stored_records)
    monkeypatch.setattr(Stream, "run", _counting(Stream.run, parsed))
    out = tmp_path / "stream"
    fresh = _run(model, out, "stream", **config)
    during = parsed[parsed.index("stream started") + 1 : parsed.index("stream ended")]
    assert during == [] and read == []
    # B's and oracle_B's parts kept, the arms computed again from them
    for part in (out / "parts").glob("arms-*"):
        part.unlink()
    (out / "records.jsonl").unlink()
    parsed.clear()
    prepared = prepare(RunConfig(model=str(model), **{**TINY, **config}))
    run(prepared, out, progress=False, schedule="stream")
    assert _files(out) == fresh
    assert sorted(read) == sorted(f"{b}-s0-c{c:05d}" for b in ("B", "oracle_B") for c in (0, 1))


def _counting(real, marks: list):
    def counted(self):
        marks.append("stream started")
        real(self)
        marks.append("stream ended")

    return counted


def test_records_do_not_depend_on_the_chunk_size_or_the_kv_budget(tiny_checkpoint, tmp_path):
    """Chunks of 1, 2 and 5 problems and a KV budget far below the stream's open work (the engine waits for blocks) give
    one records file; so does the units schedule at another chunk size."""
    model = tiny_checkpoint("qwen3", close_boost=2.6)
    common = dict(n=5, conditions=("primary", "oracle"))
    reference = _run(model, tmp_path / "u2", "units", chunk_size=2, **common)
    for name, extra in {
        "s1": dict(chunk_size=1),
        "s5": dict(chunk_size=5),
        "s5-budget": dict(chunk_size=5, max_batch_tokens=1500),
        "u5": dict(chunk_size=5),
    }.items():
        schedule = "units" if name.startswith("u") else "stream"
        got = _run(model, tmp_path / name, schedule, **common, **extra)
        assert got["records.jsonl"] == reference["records.jsonl"], name


def test_arms_fork_from_running_bases_without_a_barrier(tiny_checkpoint, tmp_path, monkeypatch):
    """Most arm groups start while their own B still runs (its cut found, its KV copied), and the
    first chunk's arms start before the last chunk's bases have finished: no phase barrier."""
    model = tiny_checkpoint("qwen3", close_boost=2.6)
    forks, finished_bases = [], []
    submit_fork = stream_module.Stream.fork
    generate_done = jobs_module.BaseJob._finished

    def fork(self, request, on_finish):
        running = request.reuse is not None and request.reuse.id in self.waiters
        forks.append((request.reuse is not None, running, len(finished_bases)))
        return submit_fork(self, request, on_finish)

    def finished(self, j, out):
        finished_bases.append(self.unit.name)
        return generate_done(self, j, out)

    monkeypatch.setattr(stream_module.Stream, "fork", fork)
    monkeypatch.setattr(jobs_module.BaseJob, "_finished", finished)
    config = dict(n=6, chunk_size=2, conditions=("primary",))
    streamed = _run(model, tmp_path / "stream", "stream", **config)
    assert all(reused for reused, _, _ in forks)  # every fork names its base's cache
    assert sum(running for _, running, _ in forks) > len(forks) // 2
    assert forks[0][2] < 6  # the first arms started before half the 12 bases had finished
    monkeypatch.undo()
    assert streamed == _run(model, tmp_path / "units", "units", **config)


def test_the_stream_is_chosen_only_where_records_do_not_depend_on_the_batch(tiny_checkpoint):
    """At any thread count where the needle holds (the engine's CPU forward is single-threaded
    by construction); never in bf16; and where the needle differs, the units schedule, saying
    why (a needle made to fail by the engine without its fixed-shape products)."""
    model = tiny_checkpoint("qwen3", close_boost=2.6)
    config = dict(model=str(model), n=2, **{**TINY, "device": "cpu"})
    for threads in (1, 2):
        torch.set_num_threads(threads)
        chosen = choose_schedule(prepare(RunConfig(**config)))
        assert chosen.name == "stream" and chosen.invariance.holds
        assert chosen.invariance.threads == threads
    bf16 = choose_schedule(prepare(RunConfig(**{**config, "dtype": "bfloat16"})))
    assert bf16.name == "units" and "bfloat16" in bf16.why


def test_where_the_needle_differs_the_run_takes_the_units_schedule(tiny_checkpoint, monkeypatch):
    model = tiny_checkpoint("qwen3", close_boost=2.6)
    config = dict(model=str(model), n=2, **{**TINY, "device": "cpu"})
    prepared = prepare(RunConfig(**config))
    failing = InvarianceCheck(False, 1, (2, 5), (5,), 0.1)
    monkeypatch.setattr(schedule_module, "needle", lambda model: failing)
    chosen = choose_schedule(prepared)
    assert chosen.name == "units" and "differed among 5 prompts" in chosen.why
    assert chosen.to_manifest()["invariance"]["differing"] == [5]


@pytest.mark.slow
def test_smollm2_resolutions_and_signals_stream_to_the_same_bytes(smollm2_streamed_run, tmp_path):
    """SmolLM2 delegates on most StrategyQA problems: its resolutions start as soon as a problem's
    base and arms are final, forked from B's cache, and every file of `nudge run`'s streamed run
    (tests/splice/conftest.py, SMOLLM2_STREAMED: two problems in two chunks, consistency samples
    on) equals the units schedule's."""
    units = _run("smollm2", tmp_path / "units", "units", **SMOLLM2_STREAMED)
    assert _files(smollm2_streamed_run) == units
    resolutions = (smollm2_streamed_run / "resolutions.jsonl").read_text().splitlines()
    assert sum('"unresolved":null' in line for line in resolutions) >= 2
