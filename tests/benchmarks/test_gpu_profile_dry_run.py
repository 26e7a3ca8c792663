"""benchmarks/gpu_profile.py runs whole on CPU (`--dry-run`), so that the script behind the H200
run's profile figures cannot rot: every part prints, and `$OUT/profile.txt` holds the tables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_profile_script_runs_every_part_on_cpu(tmp_path):
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_profile.py"), "--dry-run"],
        env=dict(os.environ, OUT=str(tmp_path)),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert sum(line.startswith("engine prefill of 96 tokens, call") for line in lines) == 3
    assert sum(line.startswith("HF forward of 96 tokens, call") for line in lines) == 2
    assert any(line.startswith("eager decode step, 12 rows: median") for line in lines)
    written = (tmp_path / "profile.txt").read_text()
    assert written.count("Self CPU time total") == 4  # two tables of each profile
