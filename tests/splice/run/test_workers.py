"""`nudge run --workers N`: N single-threaded shard processes merged, whose records are byte for
byte those of the same run in one process (splice/run/workers.py)."""

from __future__ import annotations

import json

import pytest

from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.prepare import prepare
from nudgeability.splice.run.runner import run
from nudgeability.splice.run.workers import WorkerError, run_workers

TINY = dict(task="strategyqa", max_new_tokens=16, max_new_tokens_arm=8, device="cpu")


def test_two_workers_give_the_records_of_one_process(tiny_checkpoint, tmp_path):
    model = tiny_checkpoint("qwen3", close_boost=2.6)
    config = RunConfig(model=str(model), n=6, **TINY)
    run(prepare(config), tmp_path / "one", progress=False)
    result = run_workers(config, tmp_path / "two", 2, progress=False)
    one = (tmp_path / "one" / "records.jsonl").read_bytes()
    assert result.records == len(one.splitlines())
    assert (tmp_path / "two" / "records.jsonl").read_bytes() == one
    manifest = json.loads((tmp_path / "two" / "manifest.json").read_text())
    shard = json.loads((tmp_path / "two.workers" / "shard-1-of-2" / "manifest.json").read_text())
    assert shard["threads"] == 1 and shard["schedule"]["name"] == "stream"
    assert manifest["config"]["shard"] is None


def test_a_failing_worker_names_its_log_and_its_error(tmp_path):
    config = RunConfig(model=str(tmp_path / "no-such-model"), n=2, **TINY)
    with pytest.raises(WorkerError, match=r"worker 1/2 failed \(see .*shard-1\.log\)"):
        run_workers(config, tmp_path / "out", 2, progress=False)
    assert not (tmp_path / "out").exists()
