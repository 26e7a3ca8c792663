"""The run's ETA (splice/run/progress.py `RunEta`) against a case worked by hand: sequences left
per phase, times the mean new tokens a sequence of the phase has made (half its budget before
any), over the tokens made per second since the first computed unit began."""

from __future__ import annotations

import pytest

from nudgeability.splice.experiment.conditions import parse_conditions
from nudgeability.splice.run import progress
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.units import UnitCounts
from nudgeability.splice.rundir.plan import Plan, Unit


def test_the_eta_counts_the_tokens_left_at_the_rate_so_far(monkeypatch):
    # two problems, one a chunk; NT, B and B's four arms (empty, conf, doubt, neutral)
    plan = Plan(("p1", "p2"), tuple(parse_conditions("primary")), (0,), chunk_size=1)
    config = RunConfig(max_new_tokens=100, max_new_tokens_arm=40)
    eta = progress.RunEta(plan, config)
    monkeypatch.setattr(progress.time, "perf_counter", lambda: 100.0)
    assert eta.seconds_left() is None  # nothing computed yet
    # NT of chunk 0: one sequence of 10 tokens in the 10 s before now: 1 token/s
    eta.done(Unit("NT", 0, 0), 1, UnitCounts(sequences=1, generated_tokens=10, seconds=10.0))
    # left: NT 1 x 10; B 2 x 50 (half its budget); arms 2 x 4 x 20
    assert eta.seconds_left() == pytest.approx(10 + 100 + 160)
    # B of chunk 0 reused from the store: one sequence fewer, no tokens, the rate unchanged
    eta.done(Unit("B", 0, 0), 1, None)
    assert eta.seconds_left() == pytest.approx(10 + 50 + 160)
    # 20 s later an arms unit: 4 arms of 5 tokens; 30 tokens in 30 s
    monkeypatch.setattr(progress.time, "perf_counter", lambda: 120.0)
    eta.done(Unit("arms", 0, 0), 4, UnitCounts(sequences=4, generated_tokens=20, seconds=5.0))
    # left: NT 1 x 10, B 1 x 50, arms 4 x 5; at 1 token/s
    assert eta.seconds_left() == pytest.approx(10 + 50 + 20)
