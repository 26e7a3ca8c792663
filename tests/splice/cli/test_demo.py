"""The first run shows the tool: `nudge run` with no options is StrategyQA on the embedded model,
8 problems, and ends with its stats and report.html; MuSiQue is one flag away, its n_S = 0
explained (splice/cli/run.py)."""

from __future__ import annotations

import argparse

import numpy as np

from nudgeability.bench import synthetic_run as synthetic
from nudgeability.splice.cli import report as report_cli
from nudgeability.splice.cli import run as run_cli


def _parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    run_cli.register(parser.add_subparsers())
    return parser.parse_args(["run", *argv])


def test_the_default_run_is_the_strategyqa_demo_with_a_report():
    config = run_cli.config_from_args(_parsed())
    assert (config.model, config.task, config.n, config.decoding) == (
        "smollm2",
        "strategyqa",
        8,
        "greedy",
    )
    assert config.conditions == ("all",) and not _parsed().no_report
    assert run_cli.config_from_args(_parsed("--task", "musique")).n == 3
    assert run_cli.config_from_args(_parsed("--task", "musique", "--n", "5")).n == 5


def test_report_run_writes_the_report_beside_the_run_and_prints_it(tmp_path, capsys):
    arrays = synthetic.paper_arrays(np.random.default_rng(1), 12)
    out = synthetic.write_run(tmp_path / "runs" / "m-strategyqa-greedy", synthetic.records(arrays))
    page = report_cli.report_run(out)
    assert page == tmp_path / "runs" / "m-strategyqa-greedy-report" / "report.html"
    assert (
        page.is_file()
        and (page.parent / "stats.json").is_file()
        and (page.parent / "table1.md").is_file()
    )
    printed = capsys.readouterr()
    assert printed.out.strip() == str(page)
    assert page.resolve().as_uri() in printed.err and "n_S = 0" not in printed.err


def test_a_run_without_arms_explains_its_empty_report(tmp_path, capsys):
    """SmolLM2 on MuSiQue never closes its thinking: B is TRUNC and no arm exists."""
    n = 3
    arrays = {"s": np.zeros(n, np.int8), "base": np.full(n, 3, np.int8)}
    arrays |= {code: np.full(n, -1, np.int8) for code in ("conf", "doubt")}
    asked = {"config": {"conditions": ["NT", "B", "conf", "doubt"]}}  # the arms the run asked for
    out = synthetic.write_run(
        tmp_path / "m-musique-greedy", synthetic.records(arrays), manifest_extra=asked
    )
    page = report_cli.report_run(out)
    assert page.is_file()
    assert "n_S = 0" in capsys.readouterr().err
