"""The needle's answer kept on disk (engine/invariant/needle.py, `cached_check`): read back by a
later run with the same key instead of running the needle again, and run again whenever anything
that chooses a kernel differs (a library setting, the thread count, the model's shapes), or the
file cannot be read."""

from __future__ import annotations

import json
import os

import pytest
import torch

from nudgeability.engine.invariant import needle
from nudgeability.engine.invariant.needle import cached_check
from nudgeability.models.testing.tiny import tiny_model


@pytest.fixture
def needles(monkeypatch, tmp_path):
    """The needles actually run (each call of `_differing`), with the cache in tmp_path."""
    monkeypatch.setenv("NUDGE_CACHE", str(tmp_path))
    ran = []
    real = needle._differing

    def counted(*args, **kwargs):
        ran.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(needle, "_differing", counted)
    return ran


def _files(tmp_path):
    return sorted((tmp_path / "needle").glob("*.json"))


def test_a_second_run_reads_the_answer_and_runs_no_needle(needles, tmp_path):
    model = tiny_model("qwen3", num_layers=1, seed=3)
    first = cached_check(model)
    assert len(needles) == 1 and not first.cached and first.holds
    second = cached_check(model)
    assert len(needles) == 1 and second.cached
    assert second.to_manifest() == first.to_manifest()
    (path,) = _files(tmp_path)
    assert json.loads(path.read_text())["key"] == needle.invariance_key(model)


def test_another_setting_thread_count_or_shape_runs_the_needle_again(
    needles, monkeypatch, tmp_path
):
    model = tiny_model("llama", num_layers=1, seed=3)
    cached_check(model)
    # another branch than the one this run has (the suite itself may run under MKL_CBWR=AVX2)
    other = "COMPATIBLE" if os.environ.get("MKL_CBWR") == "AVX2" else "AVX2"
    monkeypatch.setenv("MKL_CBWR", other)
    cached_check(model)
    assert len(needles) == 2
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if threads != 1 else 2)
    try:
        cached_check(model)
    finally:
        torch.set_num_threads(threads)
    assert len(needles) == 3
    cached_check(tiny_model("llama", num_layers=2, seed=3))
    assert len(needles) == 4
    assert len(_files(tmp_path)) == 4
    cached_check(model)  # back to the second key: read, not run
    assert len(needles) == 4


def test_a_file_that_cannot_be_read_is_run_again_and_rewritten(needles, tmp_path):
    model = tiny_model("llama", num_layers=1, seed=3)
    cached_check(model)
    (path,) = _files(tmp_path)
    path.write_text('{"key": {"format"')  # cut short, as by a crash mid-write
    again = cached_check(model)
    assert len(needles) == 2 and not again.cached
    assert json.loads(path.read_text())["check"] == again.to_manifest()


def test_a_failing_answer_is_kept_failing(monkeypatch, tmp_path):
    monkeypatch.setenv("NUDGE_CACHE", str(tmp_path))
    monkeypatch.setattr(needle, "_differing", lambda *a, **k: [17])
    model = tiny_model("llama", num_layers=1, seed=3)
    assert not cached_check(model).holds
    monkeypatch.setattr(needle, "_differing", lambda *a, **k: pytest.fail("ran again"))
    kept = cached_check(model)
    assert kept.cached and not kept.holds and kept.differing == (17,)
