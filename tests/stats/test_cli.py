"""`nudge stats` and `nudge report` on synthetic run directories: every file, numbers equal summarize()."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from nudgeability.splice.cli import main
from nudgeability.stats import NONE, TRUNC, load_experiments, summarize
from nudgeability.stats.cli import read_stats
from nudgeability.stats.serialize import to_jsonable

ALL_ARMS = (
    "empty",
    "neutral",
    "conf_second",
    "doubt_second",
    "conf_reviewer",
    "doubt_reviewer",
    "conf_expert",
    "doubt_expert",
    "sealed_conf",
    "sealed_doubt",
    "oracle_B",
    "oracle_conf",
    "oracle_doubt",
)


def _arrays(planted, rng, n, extra_arms=()):
    arrays = planted.sample(rng, n)
    unclosed = (arrays["base"] == TRUNC) & (arrays["conf"] == NONE)
    for code in extra_arms:
        drawn = planted.sample(rng, n)["doubt" if "doubt" in code else "conf"]
        arrays[code] = np.where(unclosed, NONE, drawn).astype(np.int8)
    return arrays


@pytest.fixture
def run_dirs(tmp_path, planted, runs):
    rng = np.random.default_rng(77)
    full = runs.write_run_dir(
        tmp_path / "a",
        runs.records_from_arrays(_arrays(planted, rng, 300, ALL_ARMS)),
        model="tiny-a",
    )
    plain = runs.write_run_dir(
        tmp_path / "b",
        runs.records_from_arrays(_arrays(planted, rng, 300), task="strategyqa"),
        model="tiny-b",
        task="strategyqa",
    )
    lines = []
    for seed in (0, 1, 2):
        lines += runs.records_from_arrays(_arrays(planted, rng, 60), seed=seed)
    sampled = runs.write_run_dir(
        tmp_path / "c", lines, model="tiny-a", decoding="sampled", seeds=(0, 1, 2)
    )
    return [full, plain, sampled]


def test_nudge_stats_writes_every_file_and_its_table_matches_summarize(tmp_path, run_dirs, capsys):
    out = tmp_path / "stats"
    assert (
        main(["stats", *map(str, run_dirs), "--out", str(out), "--n-boot", "2000", "--seed", "3"])
        == 0
    )
    for name in ("stats.json", "table.md", "table.csv", "table.tex"):
        assert (out / name).stat().st_size > 0, name
    summaries = [summarize(table, n_boot=2000, seed=3) for table in load_experiments(run_dirs)]
    assert [(e.model, e.task, e.decoding) for e in summaries] == [
        ("tiny-a", "musique", "greedy"),
        ("tiny-b", "strategyqa", "greedy"),
        ("tiny-a", "musique", "sampled"),
    ]

    all_rows = list(csv.DictReader(io.StringIO((out / "table.csv").read_text())))
    rows = [r for r in all_rows if r["row"] == "experiment"]
    markdown, latex = (out / "table.md").read_text(), (out / "table.tex").read_text()
    for row, e in zip(rows, summaries, strict=True):
        for key in ("S", "WT", "WTrand", "L"):
            assert float(row[key]) == getattr(e, key)  # full precision: equal, not approximately
            interval = getattr(e, f"{key}_ci")
            assert (float(row[f"{key}_low"]), float(row[f"{key}_high"])) == (
                interval.low,
                interval.high,
            )
        assert (int(row["n_S"]), int(row["n_WT"]), int(row["F"]), int(row["H"])) == (
            e.n_S,
            e.n_WT,
            e.F,
            e.H,
        )
        assert row["profile"] == e.profile and int(row["L_dagger"]) == e.L_ci.excludes_zero
        dagger = "†" if e.L_ci.excludes_zero else ""
        cell = f"{e.L:.1f}{dagger} [{e.L_ci.low:.1f}, {e.L_ci.high:.1f}]"
        assert (
            f"| {e.S:.1f} [{e.S_ci.low:.1f}, {e.S_ci.high:.1f}] |" in markdown and cell in markdown
        )
        assert f"{e.S:.1f} [{e.S_ci.low:.1f}, {e.S_ci.high:.1f}]" in latex
    # stats.json holds exactly the summaries, and reads back into equal objects.
    document = json.loads((out / "stats.json").read_text())
    assert document["experiments"] == json.loads(json.dumps(to_jsonable(summaries)))
    assert to_jsonable(read_stats(out)) == to_jsonable(summaries)
    # The full run has every pair and diagnostic; the sampled run is clustered with per-seed rows.
    full, _, sampled = summaries
    assert set(full.pairs) == {"first", "second", "reviewer", "expert", "sealed", "oracle"}
    assert full.oracle is not None and not np.isnan(full.controls.empty_vs_base)
    assert sampled.clustered and sorted(sampled.per_seed) == [0, 1, 2] and sampled.n_problems == 60
    assert "| pooled | greedy | 2 |" in markdown and "| pooled | sampled | 1 |" in markdown
    seed_rows = [r for r in all_rows if r["row"] == "seed"]
    assert [(int(r["seed"]), float(r["S"])) for r in seed_rows] == [
        (k, p.S) for k, p in sampled.per_seed.items()
    ]
    # The diagnostics table: S of the other pairs, then Gamma.
    pairs = " | ".join(
        f"{full.pairs[p].S:.1f}" for p in ("second", "reviewer", "expert", "sealed", "oracle")
    )
    assert f"| tiny-a | musique | greedy | {pairs} | {full.gamma.gamma:.1f} |" in markdown


def test_nudge_report_draws_every_figure_as_png_and_pdf(tmp_path, run_dirs):
    stats_dir, report_dir = tmp_path / "stats", tmp_path / "report"
    assert main(["stats", *map(str, run_dirs), "--out", str(stats_dir), "--n-boot", "500"]) == 0
    assert main(["report", str(stats_dir), "--out", str(report_dir)]) == 0
    for stem in ("s_vs_l", "flip_composition", "delegation", "oracle"):
        assert (report_dir / f"{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", stem
        assert (report_dir / f"{stem}.pdf").read_bytes()[:5] == b"%PDF-", stem
    # Straight from a run directory too.
    assert (
        main(["report", str(run_dirs[1]), "--out", str(tmp_path / "direct"), "--n-boot", "200"])
        == 0
    )
    assert (tmp_path / "direct" / "s_vs_l.png").is_file()


def test_cli_errors_are_one_line_naming_the_file(tmp_path, capsys):
    (tmp_path / "bare").mkdir()
    assert main(["stats", str(tmp_path / "bare"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "bare/manifest.json: missing" in err
    assert (
        main(["report", str(tmp_path / "bare" / "stats.json"), "--out", str(tmp_path / "o")]) == 2
    )


def test_profile_thresholds_are_options_and_the_rule_is_printed(tmp_path, run_dirs):
    from nudgeability.stats import ProfileRule

    out = tmp_path / "stats"
    argv = ["stats", *map(str, run_dirs[:2]), "--out", str(out), "--n-boot", "500"]
    assert main(argv + ["--min-s", "0", "--min-l", "7.5"]) == 0
    markdown = (out / "table.md").read_text()
    assert "min |S| = 0 pp, min |L| = 7.5 pp" in markdown
    assert "% Profile rule (95% intervals, min |S| = 0 pp" in (out / "table.tex").read_text()
    rows = [r for r in csv.DictReader(io.StringIO((out / "table.csv").read_text()))]
    for row, e in zip([r for r in rows if r["row"] == "experiment"], read_stats(out), strict=True):
        assert e.profile_rule == ProfileRule(0, 7.5)
        assert row["profile"] == ProfileRule(0, 7.5).label(e.S, e.S_ci, e.L, e.L_ci)
    # The pooled SELF->TOOL share beside the medians: all flip events of both experiments summed.
    flips = [e.primary.flips for e in read_stats(out)]
    stt = sum(f.self_to_tool_well + f.self_to_tool_ill for f in flips)
    pooled = next(r for r in rows if r["row"] == "median" and r["task"] == "pooled")
    assert (int(pooled["self_to_tool_flips"]), int(pooled["pooled_flips"])) == (
        stt,
        sum(f.flips for f in flips),
    )
    assert f"({stt}/{sum(f.flips for f in flips)})" in markdown


def test_a_negative_threshold_is_refused(tmp_path, run_dirs, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["stats", str(run_dirs[1]), "--out", str(tmp_path / "o"), "--min-l", "-2"])
    assert exit_info.value.code == 2
    assert "--min-l: expected a number of pp >= 0, got -2" in capsys.readouterr().err
