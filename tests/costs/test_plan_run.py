"""`nudge plan` end to end on the embedded model: the run it would make, measured, estimated and
printed (costs/estimate/run_estimate.py, report.py, cli/plan.py), and the lengths a run's records give."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from nudgeability.cli import main
from nudgeability.costs.estimate import Lengths
from nudgeability.costs.estimate.campaign import load_campaign
from nudgeability.costs.estimate.report import as_json, as_text
from nudgeability.costs.estimate.run_estimate import estimate_paper, estimate_run, measure_run
from nudgeability.costs.estimate.workload import lengths_from_records
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.prepare import prepare


def test_a_plan_measures_the_run_and_the_paper_campaign_and_names_its_assumptions():
    config = RunConfig(task="strategyqa", n=2, max_new_tokens=8, max_new_tokens_arm=4)
    lengths = Lengths(base_share=0.5, arm_share=0.25, source="the test")
    measured = measure_run(config, lengths=lengths, workers=1)
    run = estimate_run(config, lengths=lengths, measured=measured)
    # the work, counted from the runner's own plan: 2 problems x (NT, B, oracle_B), and the arms
    # of B and oracle_B, each 4 new tokens a base, 1 an arm
    plan = prepare(config).plan
    arms = len(plan.arms_of("B")) + len(plan.arms_of("oracle_B"))
    assert run.sequences == pytest.approx(2 * (3 + arms))
    assert run.generated_tokens == pytest.approx(2 * (3 * 4 + arms * 1))
    assert run.wall_seconds == pytest.approx(run.startup_seconds + run.compute_seconds)
    assert run.compute_seconds > 0 and run.rates.decode[0][0] == 1
    assert run.gpu_hours is None  # a CPU run
    paper = estimate_paper(measured, load_campaign())
    assert len(paper.runs) == 18 and paper.gpu_hours == pytest.approx(paper.wall_seconds / 3600)
    data = as_json(run, paper)
    assert data["wall_seconds"] == pytest.approx(paper.wall_seconds)
    assert data["gpu_hours"] == pytest.approx(paper.gpu_hours)
    assert data["run"]["wall_seconds"] == pytest.approx(run.wall_seconds)
    json.dumps(data)  # one JSON object
    text = as_text(run, paper)
    assert "the test" in text and "bases generate 50%" in text
    assert run.captures == () and "no CUDA graphs to compile and capture on cpu" in text
    for model in load_campaign().models:
        assert model.name in text and model.source in text


def test_plan_refuses_a_malformed_campaign_file_in_one_line(tmp_path, capsys):
    bad = tmp_path / "campaign.toml"
    bad.write_text("problems = 'many'\n")
    assert main(["plan", "--paper", "--campaign", str(bad)]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and "field problems" in err


def test_the_help_names_the_estimate_and_the_run_flags(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = capsys.readouterr().out
    for flag in ("--paper", "--json", "--from-run", "--max-new-tokens", "--workers", "--device"):
        assert flag in out


def record(condition, generated, boundary=None, prefix=None, finish="eos"):
    return SimpleNamespace(
        condition=condition,
        generated_ids=[0] * generated,
        boundary=boundary,
        prefix_tokens=prefix,
        finish_reason=finish,
    )


def test_lengths_from_records_are_shares_of_the_budgets():
    records = [
        record("NT", 50),
        record("B", 100, boundary=80),
        record("oracle_B", 30),  # did not close
        record("doubt", 10, prefix=80),
        record("confidence", 40, prefix=80, finish="length"),
    ]
    lengths = lengths_from_records(records, base_budget=200, arm_budget=40, where="r")
    assert lengths.base_share == pytest.approx((50 + 100 + 30) / 3 / 200)
    assert lengths.arm_share == pytest.approx((10 + 40) / 2 / 40)
    assert (lengths.base_at_budget, lengths.arm_at_budget) == (0.0, pytest.approx(1 / 2))
    assert lengths.closes == pytest.approx(0.5) and lengths.cut_share == pytest.approx(0.8)
    with pytest.raises(ValueError, match="r: no base record"):
        lengths_from_records([], 1, 1, where="r")


def test_the_announcement_before_any_rates_are_measured(tmp_path, monkeypatch):
    """What `nudge run` prints at its start where `nudge plan` never measured this model."""
    from nudgeability.costs.estimate.run_estimate import announcement

    monkeypatch.setenv("NUDGE_CACHE", str(tmp_path))  # no rates measured here
    line = announcement(prepare(RunConfig(task="strategyqa", n=2)), 1)
    assert line.startswith("nudge run: ") and "`nudge plan`" in line


def test_the_start_up_line_names_each_buckets_compile_and_capture():
    """On CUDA the start-up `nudge plan` measured includes the graphs' compile and capture of
    each bucket the run captures (costs/estimate/run_estimate.py `measure_run`), listed as measured."""
    from nudgeability.costs.estimate.report import startup_text

    run = SimpleNamespace(startup_seconds=312.4, captures=((16, 40.0), (32, 41.5)), device="cuda")
    assert startup_text(run) == (
        "  start-up measured here: 312.4 s (imports, model, needle, engine; of it the graphs' "
        "compile and capture, 81.5 s: bucket 16 40.0 s, bucket 32 41.5 s)"
    )
