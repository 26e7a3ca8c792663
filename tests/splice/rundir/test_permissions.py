"""A run directory is as readable as any file the user writes (issue 25, case 3), and a finished
run leaves no lock file behind (case 6).

The reference is what a plain `open()` and `mkdir()` create under the same umask: 0644 and 0755
under umask 022 (a co-author on a shared cluster can read the run), 0600 and 0700 under 077.
"""

from __future__ import annotations

import os

import pytest
from helpers.tiny_runs import nudge_run_args, run_nudge

from nudgeability.splice.rundir.manifest import OutputDirError
from nudgeability.splice.rundir.store import WorkStore


def _modes_by_open(tmp_path, umask: int) -> tuple[int, int]:
    previous = os.umask(umask)
    try:
        with open(tmp_path / "by-open", "w"):
            pass
        os.mkdir(tmp_path / "by-mkdir")
    finally:
        os.umask(previous)
    return (
        os.stat(tmp_path / "by-open").st_mode & 0o777,
        os.stat(tmp_path / "by-mkdir").st_mode & 0o777,
    )


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_every_file_of_a_run_and_its_merge_has_the_umask_mode(tiny_checkpoint, tmp_path, umask):
    model_dir = tiny_checkpoint("qwen3", close_boost=2.6)
    file_mode, dir_mode = _modes_by_open(tmp_path, umask)
    args = nudge_run_args(model_dir, n=2, chunk_size=1, conditions="primary")
    previous = os.umask(umask)
    try:
        shards = [tmp_path / f"shard{k}" for k in (1, 2)]
        for k, shard in enumerate(shards, 1):
            status, err = run_nudge([*args, "--shard", f"{k}/2", "--out", shard])
            assert status == 0, err
        status, err = run_nudge(["merge", tmp_path / "merged", *shards])
        assert status == 0, err
    finally:
        os.umask(previous)
    for root in (*shards, tmp_path / "merged"):
        found = {p.relative_to(root).as_posix(): p for p in root.rglob("*")}
        assert {"manifest.json", "records.jsonl", "timings.jsonl", "parts"} <= set(found)
        assert ".lock" not in found, "a finished run leaves no lock file"
        assert any(name.startswith("parts/") for name in found)
        for name, path in found.items():
            mode = os.stat(path).st_mode & 0o777
            assert mode == (dir_mode if path.is_dir() else file_mode), (name, oct(mode))
        assert os.stat(root).st_mode & 0o777 == dir_mode


def test_the_lock_refuses_a_second_writer_and_goes_with_the_first(tmp_path):
    manifest = {"config": {"n": 1}}
    first = WorkStore.open(tmp_path / "run", manifest)
    assert (tmp_path / "run" / ".lock").is_file()
    with pytest.raises(OutputDirError, match="another `nudge run` is working"):
        WorkStore.open(tmp_path / "run", manifest)
    first.close()
    assert not (tmp_path / "run" / ".lock").exists()
    with WorkStore.open(tmp_path / "run", manifest):
        assert (tmp_path / "run" / ".lock").is_file()
    assert not (tmp_path / "run" / ".lock").exists()
