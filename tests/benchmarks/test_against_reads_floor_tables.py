"""benchmarks/fork_vs_generate_against.py reads a fork_vs_generate.py run's floor table: the
rows of an earlier commit's script (six columns) and today's (with the fixed-shape attention's
two more), from text written here as each script prints it."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "fork_vs_generate_against.py"

HEAD = "| (a) Engine.fork | 14.20 s (median; runs: 14.20) | 1 | — |\n- **b/a = 5.69×**; bound\n"
OLD = """| prefill: prefix 1024 + packed suffixes 200 tokens (s) | 5.000 | 4.000 | 0.500 | 1.250 [1.2–1.3] | 1.111 [1.1–1.2] |
| decode step, 12 rows (ms) | 180.000 | 120.000 | 30.000 | 1.500 [1.4–1.6] | 1.200 [1.1–1.3] |
| wall: prefill + 47 steps (s) | 13.460 | 9.640 | 1.910 | 1.396 [1.3–1.4] | 1.165 [1.1–1.2] |
"""
TODAY = """| prefill: prefix 1024 + packed suffixes 200 tokens (s) | 5.000 | 4.000 | 0.500 | 1.250 [1.2–1.3] | 1.111 [1.1–1.2] | 0.800 | 1.042 [1.0–1.1] |
| decode step, 12 rows (ms) | 180.000 | 120.000 | 30.000 | 1.500 [1.4–1.6] | 1.200 [1.1–1.3] | 36.000 | 1.154 [1.1–1.2] |
| wall: prefill + 47 steps (s) | 13.460 | 9.640 | 1.910 | 1.396 [1.3–1.4] | 1.165 [1.1–1.2] | 2.492 | 1.049 [1.0–1.1] |
"""


def test_the_old_six_columns_and_todays_eight():
    parse = runpy.run_path(str(SCRIPT))["parse"]
    old, today = parse(HEAD + OLD), parse(HEAD + TODAY)
    assert old["fork"] == today["fork"] == 14.20 and old["b/a"] == 5.69
    assert old["decode step"] == {
        "engine": 180.0,
        "linear": 120.0,
        "attention": 30.0,
        "over linear": 1.5,
        "over both": 1.2,
    }
    assert "over fixed" not in old["wall"]
    assert today["decode step"]["over fixed"] == 1.154
    assert today["decode step"]["least fixed"] == pytest.approx(156 / 120)  # (120 + 36) / 120
    assert today["prefill"]["least fixed"] == pytest.approx(1.2)  # (4 + 0.8) / 4
    assert today["wall"]["over both"] == 1.165
