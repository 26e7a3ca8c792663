"""util/atomic.py: the one write-to-a-temporary-then-rename helper every stage uses."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nudgeability.util.atomic import (
    atomic_directory,
    atomic_write_lines,
    atomic_write_text,
    remove_temporaries,
    temporary_prefix,
)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_failing_writer_leaves_the_previous_file_and_no_temporary(tmp_path):
    target = tmp_path / "stats.json"
    target.write_text("old")

    def lines():
        yield "new first line"
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        atomic_write_lines(target, lines())
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stats.json"]
    atomic_write_text(target, "new\n")
    assert target.read_bytes() == b"new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stats.json"]


def test_a_directory_appears_whole_or_not_at_all(tmp_path):
    target = tmp_path / "merged"
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "records.jsonl").write_text("half")
        raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []
    with atomic_directory(target) as tmp:
        (tmp / "records.jsonl").write_text("whole")
        assert not target.exists()
    assert (target / "records.jsonl").read_text() == "whole"
    assert [p.name for p in tmp_path.iterdir()] == ["merged"]


def test_replace_swaps_an_existing_directory(tmp_path):
    target = tmp_path / "cache"
    target.mkdir()
    (target / "old").write_text("x")
    with atomic_directory(target, replace=True) as tmp:
        (tmp / "new").write_text("y")
    assert [p.name for p in target.iterdir()] == ["new"]


def test_only_abandoned_temporaries_are_removed(tmp_path):
    dead = tmp_path / f".merged.tmp-{_dead_pid()}-abc"
    mine = tmp_path / (temporary_prefix("merged") + "xyz")  # this process is alive
    other = tmp_path / ".other.tmp-1-abc"
    for path in (dead, mine, other):
        path.mkdir()
    assert remove_temporaries(tmp_path, "merged", only_abandoned=True) == [dead]
    assert mine.exists() and other.exists()
    assert set(remove_temporaries(tmp_path)) == {mine, other}
    assert list(tmp_path.iterdir()) == []


def test_temporaries_carry_the_writer_pid(tmp_path):
    assert temporary_prefix("x") == f".x.tmp-{os.getpid()}-"


def test_files_written_together_replace_nothing_unless_all_are_written(tmp_path):
    from nudgeability.util.atomic import atomic_write_files

    first, second = tmp_path / "stats.json", tmp_path / "table.md"
    first.write_text("old stats")
    second.write_text("old table")
    with pytest.raises(OSError):
        atomic_write_files({first: b"new stats", tmp_path / "missing" / "x.md": b"x"})
    assert first.read_text() == "old stats"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stats.json", "table.md"]
    assert atomic_write_files({first: b"new stats", second: b"new table"}) == [first, second]
    assert (first.read_text(), second.read_text()) == ("new stats", "new table")


def _mode(path) -> int:
    return os.stat(path).st_mode & 0o777


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_written_files_and_directories_get_the_modes_of_the_umask(tmp_path, umask):
    """What a rename leaves has the mode a plain open() or mkdir() gives under the same umask
    (0644 and 0755 under umask 022), not the 0600/0700 of tempfile's private temporaries."""
    from nudgeability.util.atomic import atomic_write_bytes, atomic_write_files

    previous = os.umask(umask)
    try:
        with open(tmp_path / "by-open", "w"):
            pass
        os.mkdir(tmp_path / "by-mkdir")
        atomic_write_text(tmp_path / "a.json", "{}")
        atomic_write_bytes(tmp_path / "b.npy", b"x")
        atomic_write_files({tmp_path / "c.md": b"c", tmp_path / "d.csv": b"d"})
        with atomic_directory(tmp_path / "run") as tmp:
            atomic_write_lines(tmp / "records.jsonl", ["{}"])
    finally:
        os.umask(previous)
    file_mode, dir_mode = _mode(tmp_path / "by-open"), _mode(tmp_path / "by-mkdir")
    assert file_mode == 0o666 & ~umask and dir_mode == 0o777 & ~umask
    for name in ("a.json", "b.npy", "c.md", "d.csv", "run/records.jsonl"):
        assert _mode(tmp_path / name) == file_mode, name
    assert _mode(tmp_path / "run") == dir_mode
