"""Progress without a terminal (issue 12, item 7): when stderr is a log file or a pipe, `nudge run`
prints plain lines, never the cursor codes that redraw nested bars on a terminal."""

from __future__ import annotations

import subprocess
import sys

from helpers.tiny_runs import nudge_run_args


def test_a_run_logged_to_a_file_prints_plain_progress_lines(tiny_checkpoint, tmp_path):
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
            ),
            stdout=subprocess.DEVNULL,
            stderr=handle,
        )
    text = log.read_text()
    assert done.returncode == 0, text
    assert "\x1b[" not in text and "\r" not in text, repr(text[:400])
    lines = text.splitlines()
    for phase in ("NT", "B", "arms"):
        assert any(line.lstrip().startswith(phase) and "2/2" in line for line in lines), text
