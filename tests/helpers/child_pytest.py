"""A child pytest on some of the suite's files, in one process: for a run that needs an
environment of its own from the start (an MKL branch, another transformers on the path)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_pytest(paths: list[str], env: dict, *options: str) -> subprocess.CompletedProcess:
    """`python -m pytest -q` on `paths` (from the repository root) under `env`, on one worker
    (no xdist children of its own), the slow tests left out, no cache written."""
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-m", "not slow"]
    command += ["-p", "no:cacheprovider", *options, *paths]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
