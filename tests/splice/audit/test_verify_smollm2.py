"""`nudge verify` on a fresh run of the real SmolLM2-135M-Instruct (StrategyQA, 2 problems):
every check holds, every unit replays byte for byte."""

from __future__ import annotations

import pytest
from helpers.tiny_runs import nudge_run_args, run_nudge, run_verify

pytestmark = pytest.mark.slow


def test_a_fresh_smollm2_run_verifies_with_every_unit_replayed(tmp_path):
    out = tmp_path / "smollm2"
    status, err = run_nudge(
        nudge_run_args(out=out, n=2, conditions="primary", max_new_tokens="24,12")
    )
    assert status == 0, err
    status, lines = run_verify(out, "--all")
    assert status == 0, lines
    assert lines[-1] == "verdict: PASS"
    parts = sorted(p.stem for p in (out / "parts").glob("*.jsonl"))
    assert parts == ["B-s0-c00000", "NT-s0-c00000", "arms-s0-c00000"]
    assert (out / "parts" / "arms-s0-c00000.jsonl").stat().st_size > 0  # B closed: arms forked
    assert sorted(lines[3].rsplit(": ", 1)[1].split(", ")) == parts
