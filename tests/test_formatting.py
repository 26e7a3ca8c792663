"""The tree is formatted and linted by the one tool configured in pyproject.toml ([tool.ruff])."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True
    )


def test_ruff_format_leaves_the_tree_unchanged():
    result = _ruff("format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_lint_passes():
    result = _ruff("check", ".")
    assert result.returncode == 0, result.stdout + result.stderr
