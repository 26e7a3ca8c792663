"""`nudge run --workers N`: N single-threaded shard processes merged, whose records are byte for
byte those of the same run in one process (splice/run/workers.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.tiny_runs import nudge_run_args, run_nudge, run_verify

from nudgeability.models.loader import ModelLoadError
from nudgeability.splice.run import schedule, workers
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.prepare import prepare
from nudgeability.splice.run.runner import run
from nudgeability.splice.run.shape import settle
from nudgeability.splice.run.workers import (
    WorkerError,
    automatic_count,
    run_workers,
    worker_chunk_size,
)
from nudgeability.splice.rundir.merge import merge

TINY = dict(task="strategyqa", max_new_tokens=16, max_new_tokens_arm=8, device="cpu")


def _two(config: RunConfig, out: Path):
    """The shape of `config` as two workers into `out` (`nudge run --workers 2`)."""
    shape = settle(config, "cpu", out, workers=2)
    assert (shape.workers, shape.chunk_from) == (2, "workers")
    return shape


def test_two_workers_give_the_records_of_one_process(tiny_checkpoint, tmp_path):
    model = tiny_checkpoint("qwen3", close_boost=2.6)
    config = RunConfig(model=str(model), n=6, **TINY)
    run(prepare(config), tmp_path / "one", progress=False)
    result = run_workers(config, tmp_path / "two", _two(config, tmp_path / "two"), progress=False)
    one = (tmp_path / "one" / "records.jsonl").read_bytes()
    assert result.records == len(one.splitlines())
    assert (tmp_path / "two" / "records.jsonl").read_bytes() == one
    manifest = json.loads((tmp_path / "two" / "manifest.json").read_text())
    assert manifest["config"]["shard"] is None
    # everything the workers wrote is inside the run's directory: the shards went once merged,
    # the logs stay
    assert sorted(p.name for p in (tmp_path / "two" / "workers").iterdir()) == [
        "shard-1.log",
        "shard-2.log",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]


def _counted(real, calls: Path):
    """`real`, appending the calling process's pid to `calls` each time (a forked worker too)."""

    def counted(*args, **kwargs):
        with open(calls, "a") as file:
            file.write(f"{os.getpid()}\n")
        return real(*args, **kwargs)

    return counted


def test_the_model_loads_once_and_the_workers_share_it(tiny_checkpoint, tmp_path, monkeypatch):
    # the workers are forked after the parent loads the model and runs the needle: a load or a
    # needle in a worker would write another pid
    from nudgeability.splice.run import prepare as prepare_module

    loads, needles = tmp_path / "loads.txt", tmp_path / "needles.txt"
    monkeypatch.setattr(prepare_module, "load_model", _counted(prepare_module.load_model, loads))
    monkeypatch.setattr(schedule, "cached_check", _counted(schedule.cached_check, needles))
    monkeypatch.setattr(schedule, "_CHECKS", {})
    config = RunConfig(model=str(tiny_checkpoint("gemma4", close_boost=2.6)), n=4, **TINY)
    merged = []
    monkeypatch.setattr(
        workers,
        "merge",
        lambda out, shards: merged.append(_shard_manifests(shards)) or merge(out, shards),
    )
    run_workers(config, tmp_path / "out", _two(config, tmp_path / "out"), progress=False)
    assert loads.read_text().split() == [str(os.getpid())]
    assert needles.read_text().split() == [str(os.getpid())]
    for shard in merged[0]:
        assert shard["threads"] == 1 and shard["schedule"]["name"] == "stream"


def _shard_manifests(shards) -> list[dict]:
    return [json.loads((Path(shard) / "manifest.json").read_text()) for shard in shards]


def test_a_model_that_does_not_load_fails_before_any_worker_starts(tmp_path):
    config = RunConfig(model=str(tmp_path / "no-such-model"), n=2, **TINY)
    with pytest.raises(ModelLoadError, match="no-such-model: no such file or directory"):
        run_workers(config, tmp_path / "out", _two(config, tmp_path / "out"), progress=False)
    assert not (tmp_path / "out").exists()


def test_a_failing_worker_names_its_log_and_its_error(tiny_checkpoint, tmp_path):
    config = RunConfig(model=str(tiny_checkpoint("qwen3", close_boost=2.6)), n=4, **TINY)
    (tmp_path / "out" / "workers").mkdir(parents=True)
    (tmp_path / "out" / "workers" / "shard-2-of-2").write_text(
        "a file where the shard's directory goes"
    )
    with pytest.raises(
        WorkerError, match=r"worker 2/2 failed \(see .*shard-2\.log; exit status 1\): \w+Error"
    ):
        run_workers(config, tmp_path / "out", _two(config, tmp_path / "out"), progress=False)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["workers"]  # no run, no manifest


def test_the_automatic_count(tmp_path):
    cpu = RunConfig(model="m", n=8, **TINY)
    assert automatic_count(cpu, tmp_path / "fresh", cores=2) == 2
    assert automatic_count(cpu, tmp_path / "fresh", cores=16) == 8  # one problem each at most
    assert automatic_count(replace(cpu, n=None), tmp_path / "fresh", cores=4) == 4
    assert automatic_count(replace(cpu, device="cuda"), tmp_path / "fresh", cores=2) == 1
    assert automatic_count(replace(cpu, shard=(1, 2)), tmp_path / "fresh", cores=2) == 1
    # a chunk size asked for is kept: one worker per chunk at most
    assert automatic_count(replace(cpu, chunk_size=4), tmp_path / "fresh", cores=16) == 2
    assert worker_chunk_size(replace(cpu, chunk_size=4), 2) == 4
    assert worker_chunk_size(cpu, 2) == 2 and worker_chunk_size(replace(cpu, n=1000), 2) == 32
    # a one-process run begun in `out` resumes as one process
    (tmp_path / "single").mkdir()
    (tmp_path / "single" / "manifest.json").write_text("{}")
    assert automatic_count(cpu, tmp_path / "single", cores=2) == 1
    # an interrupted workers run resumes with the count it began with, on any machine
    (tmp_path / "begun" / "workers" / "shard-1-of-3").mkdir(parents=True)
    (tmp_path / "begun" / "workers" / "shard-3-of-3").mkdir()
    assert automatic_count(cpu, tmp_path / "begun", cores=2) == 3
    # ... and a merge killed part way too (its files moved up, the manifest not yet)
    (tmp_path / "begun" / "records.jsonl").write_text("")
    assert automatic_count(cpu, tmp_path / "begun", cores=2) == 1
    (tmp_path / "begun" / "records.jsonl").unlink()
    assert automatic_count(cpu, tmp_path / "begun", cores=2) == 3
    # ... until it is merged: then `out` holds its manifest, and one process finds it complete
    (tmp_path / "begun" / "manifest.json").write_text("{}")
    assert automatic_count(cpu, tmp_path / "begun", cores=2) == 1


@pytest.fixture
def two_cores():
    """torch at two threads in this process, so `nudge run`'s automatic count is 2 on any
    machine (it reads torch's thread count); restored after."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


def test_the_default_run_takes_workers_and_resumes_as_it_began(
    tiny_checkpoint, tmp_path, two_cores
):
    model = tiny_checkpoint("qwen3", close_boost=2.6)
    args = dict(n=4, max_new_tokens="12,6", conditions="primary")
    status, err = run_nudge(nudge_run_args(model, tmp_path / "one", **args))  # --workers 1
    assert status == 0, err
    one = (tmp_path / "one" / "records.jsonl").read_bytes()
    default = nudge_run_args(model, tmp_path / "out", workers=None, **args)
    status, err = run_nudge(default)
    assert status == 0, err
    assert "(2 workers)" in err
    assert (tmp_path / "out" / "records.jsonl").read_bytes() == one
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["config"]["chunk_size"] == 1  # 4 problems, 2 workers, two chunks each
    # the same command again: `out` holds the merged run; one process finds every unit stored
    status, err = run_nudge(default)
    assert status == 0, err
    assert "0 units computed" in err and "(2 workers)" not in err
    assert (tmp_path / "out" / "records.jsonl").read_bytes() == one
    # `out` deleted: the same command starts afresh (nothing of the run was kept elsewhere)
    shutil.rmtree(tmp_path / "out")
    status, err = run_nudge(default)
    assert status == 0, err
    assert "(2 workers)" in err
    assert (tmp_path / "out" / "records.jsonl").read_bytes() == one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "out"]
    # a workers run killed before its merge (its shards kept back here from the first run's
    # merge), a shard missing a unit: the same command resumes both shards with the count they
    # began with and merges the same bytes
    shards = tmp_path / "shards"
    shards.mkdir()
    real_merge = workers.merge

    def merge_keeping_the_shards(out, dirs):
        for d in dirs:
            shutil.copytree(d, shards / Path(d).name)
        return real_merge(out, dirs)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(workers, "merge", merge_keeping_the_shards)
        shutil.rmtree(tmp_path / "out")
        assert run_nudge(default)[0] == 0
    shutil.rmtree(tmp_path / "out")
    (tmp_path / "out" / "workers").mkdir(parents=True)
    for d in shards.iterdir():
        shutil.copytree(d, tmp_path / "out" / "workers" / d.name)
    parts = sorted((tmp_path / "out" / "workers" / "shard-1-of-2" / "parts").glob("*.jsonl"))
    parts[-1].unlink()
    status, err = run_nudge(default)
    assert status == 0, err
    assert "(2 workers)" in err
    assert (tmp_path / "out" / "records.jsonl").read_bytes() == one
    assert not (tmp_path / "out" / "workers" / "shard-1-of-2").exists()
    # and the merged run passes the audit, every unit replayed in one process
    status, lines = run_verify(tmp_path / "out", "--all")
    assert status == 0 and lines[-1] == "verdict: PASS", lines


def test_threads_or_workers_one_keep_one_process(tiny_checkpoint, tmp_path, two_cores):
    model = tiny_checkpoint("qwen3", close_boost=2.6)
    for name, flags in (("threads", dict(threads=2)), ("one", dict(workers=1))):
        flags.setdefault("workers", None)
        status, err = run_nudge(nudge_run_args(model, tmp_path / name, n=4, **flags))
        assert status == 0, err
        assert "units computed" in err and not (tmp_path / name / "workers").exists()


def test_a_worker_killed_by_a_signal_is_named_so(tiny_checkpoint, tmp_path, monkeypatch):
    # the fork inherits this patch: worker 2 dies as the kernel's OOM killer would kill it
    from nudgeability.splice.run import runner

    real = runner.run

    def run_or_die(prepared, out, **kwargs):
        if prepared.config.shard == (2, 2):
            os.kill(os.getpid(), signal.SIGKILL)
        return real(prepared, out, **kwargs)

    monkeypatch.setattr(runner, "run", run_or_die)
    config = RunConfig(model=str(tiny_checkpoint("qwen3", close_boost=2.6)), n=4, **TINY)
    with pytest.raises(
        WorkerError, match=r"worker 2/2 failed \(see .*shard-2\.log; killed by SIGKILL\)"
    ):
        run_workers(config, tmp_path / "out", _two(config, tmp_path / "out"), progress=False)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["workers"]  # no run, no manifest


def _children(pid: int) -> list[int]:
    """The live (not zombie) children of `pid`, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_workers_die_with_their_parent(tiny_checkpoint, tmp_path):
    # `nudge run` killed with SIGKILL (no handler of its own runs): the kernel sends its workers
    # SIGTERM (PR_SET_PDEATHSIG), so none runs on, orphaned, holding its shard's lock; they are
    # killed just after they start, so none has finished its shard
    import subprocess
    import sys
    import time

    model = tiny_checkpoint("qwen3", close_boost=2.6)
    argv = nudge_run_args(model, tmp_path / "out", n=8, max_new_tokens="400,200", workers=2)
    parent = subprocess.Popen([sys.executable, "-m", "nudgeability.cli", *argv])
    deadline = time.monotonic() + 600
    while len(_children(parent.pid)) < 2 and parent.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    workers = _children(parent.pid)
    assert len(workers) == 2, "the workers did not start"
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in workers)
    shards = (tmp_path / "out" / "workers").glob("shard-*-of-2")
    assert not any((shard / "records.jsonl").exists() for shard in shards)


def test_usable_cores_honours_the_cgroup_quota_and_the_affinity(tmp_path):
    import torch

    from nudgeability.util.threads import usable_cores

    quota = tmp_path / "cpu.max"
    quota.write_text("max 100000\n")
    unlimited = usable_cores(quota)
    assert unlimited == min(torch.get_num_threads(), len(os.sched_getaffinity(0)))
    quota.write_text("150000 100000\n")  # docker --cpus 1.5: one whole core
    assert usable_cores(quota) == 1
    assert usable_cores(tmp_path / "no-such-file") == unlimited
