"""P(TOOL) exact against the actions taken (stats/estimators/openers.py), on records written here,
against means and a bootstrap recomputed by plain loops over the same problem draws."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nudgeability.models.families.action import Action
from nudgeability.splice.rundir.records import Likelihoods, Record
from nudgeability.stats.estimators.openers import opener_checks
from nudgeability.stats.resampling.bootstrap import Resamples


def _record(pid, code, kind, p_tool, p_answer, *, seed=0, sample=None, at=None) -> Record:
    scored = None
    if p_tool is not None:
        scored = Likelihoods([-0.1], -0.1, math.log(p_tool), math.log(p_answer))
    return Record(
        problem_id=pid,
        task="strategyqa",
        condition=code,
        sentence_id=None,
        seed=seed,
        prompt_tokens=1,
        prompt_sha256="",
        prefix_tokens=3,
        boundary=None,
        generated_ids=[],
        text="",
        finish_reason="eos",
        action=Action(kind=kind, reason="empty_commitment" if kind == "OTHER" else None),
        grade=None,
        sample=sample,
        at=at,
        likelihoods=scored,
    )


def _records():
    rng = np.random.default_rng(7)
    out = []
    for i in range(12):
        p_tool = float(rng.uniform(0.05, 0.8))
        p_answer = float(rng.uniform(0.0, 1 - p_tool))
        for seed in (0, 1):
            for k in (None, 1, 2):  # three samples per arm
                kind = "TOOL" if rng.uniform() < p_tool else str(rng.choice(["SELF", "OTHER"]))
                out.append(
                    _record(f"q{i}", "sealed_doubt", kind, p_tool, p_answer, seed=seed, sample=k)
                )
            # an arm at an extra cut and an arm without likelihoods are left out
            out.append(_record(f"q{i}", "sealed_doubt", "TOOL", 0.5, 0.1, seed=seed, at=4))
            out.append(_record(f"q{i}", "doubt", "TOOL", None, None, seed=seed))
    return out


def test_means_shares_and_the_gap_equal_a_loop_over_the_rows():
    records = _records()
    (check,) = opener_checks(records, n_boot=400, seed=3)
    rows = {}
    for r in records:
        if r.condition == "sealed_doubt" and r.at is None:
            rows.setdefault((r.problem_id, r.seed), []).append(r)
    p_tool = [rs[0].likelihoods.p_tool for rs in rows.values()]
    tool = [sum(x.action.kind == "TOOL" for x in rs) / len(rs) for rs in rows.values()]
    self_ = [sum(x.action.kind == "SELF" for x in rs) / len(rs) for rs in rows.values()]
    assert check.condition == "sealed_doubt"
    assert (check.n_rows, check.n_actions) == (24, 72)
    assert check.p_tool == pytest.approx(sum(p_tool) / 24)
    assert check.p_answer == pytest.approx(
        sum(rs[0].likelihoods.p_answer for rs in rows.values()) / 24
    )
    assert check.tool_share == pytest.approx(sum(tool) / 24)
    assert check.self_share == pytest.approx(sum(self_) / 24)
    assert check.gap == pytest.approx(check.tool_share - check.p_tool)

    # the interval: each replicate's gap by a loop over the problems it draws, then percentiles
    keys = list(rows)
    cluster = np.array([int(pid[1:]) for pid, _ in keys])
    draws = Resamples.draw(cluster, 400, 3)
    gaps = []
    for r in range(400):
        total = weight = 0.0
        for j in range(len(keys)):
            w = draws.counts[r, draws.unit[j]]
            total += w * (tool[j] - p_tool[j])
            weight += w
        gaps.append(total / weight)
    low, high = np.percentile(gaps, [2.5, 97.5])
    assert (check.gap_ci.low, check.gap_ci.high) == pytest.approx((low, high))
    assert check.gap_ci.covers(check.gap)


def test_a_run_without_likelihoods_has_no_check():
    assert opener_checks([_record("q1", "sealed_doubt", "TOOL", None, None)]) == []
