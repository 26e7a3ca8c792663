"""Progress without a terminal (issue 12, item 7): when stderr is a log file or a pipe, `nudge run`
prints plain lines, never the cursor codes that redraw nested bars on a terminal."""

from __future__ import annotations

import subprocess
import sys

from helpers.tiny_runs import nudge_run_args


def _logged_run(tiny_checkpoint, tmp_path, workers: int) -> str:
    """`nudge run` on n = 2 in chunks of 1 with stderr to a file; the file's text, after checking
    the run succeeded and wrote no cursor codes."""
    log = tmp_path / "run.log"
    with log.open("w") as handle:
        done = subprocess.run(
            [sys.executable, "-m", "nudgeability.cli"]
            + nudge_run_args(
                tiny_checkpoint("qwen3", close_boost=2.6),
                tmp_path / "out",
                n=2,
                chunk_size=1,
                conditions="primary",
                max_new_tokens="8,4",
                quiet=False,
                workers=workers,
            ),
            stdout=subprocess.DEVNULL,
            stderr=handle,
        )
    text = log.read_text()
    assert done.returncode == 0, text
    assert "\x1b[" not in text and "\r" not in text, repr(text[:400])
    return text


def test_a_run_logged_to_a_file_prints_plain_progress_lines(tiny_checkpoint, tmp_path):
    lines = _logged_run(tiny_checkpoint, tmp_path, workers=1).splitlines()
    for phase in ("NT", "B", "arms"):
        assert any(line.lstrip().startswith(phase) and "2/2" in line for line in lines), lines


def test_workers_logged_to_a_file_print_plain_lines_of_the_units_stored(tiny_checkpoint, tmp_path):
    # the parent's bar counts the units the workers have stored; each worker's phase lines go to
    # its own log
    text = _logged_run(tiny_checkpoint, tmp_path, workers=2)
    # n = 2 in chunks of 1: NT, B and arms of two chunks
    assert any(line.startswith("units: 6/6 unit (100%)") for line in text.splitlines()), text
    for k in (1, 2):
        worker = (tmp_path / "out" / "workers" / f"shard-{k}.log").read_text()
        assert "\x1b[" not in worker and "\r" not in worker, repr(worker[:400])
        assert any(
            line.lstrip().startswith("arms") and "1/1" in line for line in worker.splitlines()
        ), worker
