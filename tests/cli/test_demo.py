"""The first run shows the tool: `nudge run` with no options is StrategyQA on the embedded model,
8 problems, and ends with its stats and report.html; MuSiQue is one flag away, its n_S = 0
explained (cli/run.py, stats/report/pipeline.py `report_run`)."""

from __future__ import annotations

import argparse

import numpy as np
from helpers import synthetic_run as synthetic

from nudgeability.cli import report as report_cli
from nudgeability.cli import run as run_cli


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
    assert not run_cli.config_from_args(_parsed()).static_decode  # the eager cascade
    assert run_cli.config_from_args(_parsed("--static-decode")).static_decode


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


def _run_without_arms(path, model: str, task: str):
    """B is TRUNC on every problem, so no arm exists (as SmolLM2's on MuSiQue: its thinking never
    closes), though the run asked for the confidence and the doubt arm."""
    n = 3
    arrays = {"s": np.zeros(n, np.int8), "base": np.full(n, 3, np.int8)}
    arrays |= {code: np.full(n, -1, np.int8) for code in ("conf", "doubt")}
    asked = {"config": {"conditions": ["NT", "B", "conf", "doubt"]}}  # the arms the run asked for
    records = synthetic.records(arrays, task=task)
    return synthetic.write_run(path, records, model=model, task=task, manifest_extra=asked)


def test_a_run_without_arms_explains_its_empty_report(tmp_path, capsys):
    page = report_cli.report_run(_run_without_arms(tmp_path / "m-musique-greedy", "m", "musique"))
    assert page.is_file()
    err = capsys.readouterr().err
    assert (
        "nudge run: m / musique: n_S = 0: no problem has both the confidence and the doubt arm"
        in err
    )
    # another model's empty report is not SmolLM2's: the reason stays the records' own
    assert "SmolLM2" not in err and "--task strategyqa" not in err


def test_only_smollm2_on_musique_is_told_that_its_thinking_never_closes(tmp_path, capsys):
    """The demo's MuSiQue run prints the line it always printed; SmolLM2 on StrategyQA gets none of it."""
    report_cli.report_run(_run_without_arms(tmp_path / "s-musique", "smollm2", "musique"))
    assert capsys.readouterr().err.splitlines()[0] == (
        "nudge run: smollm2 / musique: n_S = 0: no problem has both the confidence and the doubt "
        "arm completed (on MuSiQue SmolLM2 never closes its thinking, so no arm is forked); the "
        "report shows the empty shape. `nudge run --task strategyqa` fills it."
    )
    report_cli.report_run(_run_without_arms(tmp_path / "s-strategyqa", "smollm2", "strategyqa"))
    assert capsys.readouterr().err.splitlines()[0] == (
        "nudge run: smollm2 / strategyqa: n_S = 0: no problem has both the confidence and the "
        "doubt arm completed; the report shows the empty shape."
    )
