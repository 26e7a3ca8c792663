"""`nudge stats` and `nudge report` as commands: flags reach the pipeline, the written files are
printed one per line, and errors are one line naming the file or the flag."""

from __future__ import annotations

import numpy as np
import pytest

from nudgeability.cli import main
from nudgeability.stats import ProfileRule
from nudgeability.stats.report.document import PAPER_TABLE_FILES, TABLE_FILES, read_stats


@pytest.fixture
def run_dir(tmp_path, planted, runs):
    arrays = planted.sample(np.random.default_rng(4), 80)
    return runs.write_run_dir(tmp_path / "run", runs.records_from_arrays(arrays))


def test_the_commands_print_every_file_they_write(tmp_path, run_dir, capsys):
    out, report = tmp_path / "stats", tmp_path / "report"
    assert main(["stats", str(run_dir), "--out", str(out), "--n-boot", "100"]) == 0
    names = ["stats.json", *TABLE_FILES, *PAPER_TABLE_FILES]
    assert capsys.readouterr().out.splitlines() == [str(out / name) for name in names]
    assert main(["report", str(out), "--out", str(report)]) == 0
    stems = ("s_vs_l", "flip_composition", "delegation", "oracle")
    figures = [str(report / f"{stem}.{f}") for stem in stems for f in ("png", "pdf")]
    assert capsys.readouterr().out.splitlines() == [*figures, str(report / "report.html")]


def test_the_flags_reach_the_pipeline(tmp_path, run_dir, capsys):
    out = tmp_path / "stats"
    argv = ["stats", str(run_dir), "--out", str(out), "--n-boot", "300", "--seed", "7"]
    assert main(argv + ["--min-s", "0", "--min-l", "7.5", "--label", f"{run_dir}=mine"]) == 0
    (summary,) = read_stats(out)
    assert (summary.n_boot, summary.boot_seed, summary.model) == (300, 7, "tiny (mine)")
    assert summary.profile_rule == ProfileRule(0, 7.5)


def test_cli_errors_are_one_line_naming_the_file(tmp_path, capsys):
    (tmp_path / "bare").mkdir()
    assert main(["stats", str(tmp_path / "bare"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "bare/manifest.json: missing" in err
    assert (
        main(["report", str(tmp_path / "bare" / "stats.json"), "--out", str(tmp_path / "o")]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("nudge report: error: ") and "stats.json" in err


def test_a_bad_label_names_the_flag(tmp_path, run_dir, capsys):
    assert main(["stats", str(run_dir), "--label", "nolabel", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == "nudge stats: error: --label nolabel: expected RUN_DIR=NAME\n"
    assert main(["stats", str(run_dir), "--label", "/elsewhere=x", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == "nudge stats: error: --label /elsewhere: not one of the run directories given\n"


def test_a_negative_threshold_is_refused(tmp_path, run_dir, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["stats", str(run_dir), "--out", str(tmp_path / "o"), "--min-l", "-2"])
    assert exit_info.value.code == 2
    assert "--min-l: expected a number of pp >= 0, got -2" in capsys.readouterr().err
