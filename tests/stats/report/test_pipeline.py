"""The pipelines of `nudge stats` and `nudge report` (run_stats, run_report) on synthetic run
directories: every file, numbers equal summarize(), and nothing written when a step fails."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from nudgeability.splice.experiment.conditions import CONDITION_CODES
from nudgeability.stats import NONE, TRUNC, ProfileRule, RecordsError, load_experiments, summarize
from nudgeability.stats.report.document import PAPER_TABLE_FILES, TABLE_FILES, read_stats
from nudgeability.stats.report.pipeline import ReportOptions, StatsOptions, run_report, run_stats
from nudgeability.stats.report.serialize import to_jsonable

# every condition but the ones each table has (NT, B and the primary pair), in canonical order
ALL_ARMS = tuple(code for code in CONDITION_CODES if code not in ("NT", "B", "conf", "doubt"))


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


def test_run_stats_writes_every_file_and_its_table_matches_summarize(tmp_path, run_dirs):
    out = tmp_path / "stats"
    result = run_stats(StatsOptions(run_dirs, out=out, n_boot=2000, seed=3))
    names = ["stats.json", *TABLE_FILES, *PAPER_TABLE_FILES]
    assert result.written == [out / name for name in names]  # no resolution, no signal
    assert result.values == [] and result.grounding == [] and result.warnings == []
    summaries = [summarize(table, n_boot=2000, seed=3) for table in load_experiments(run_dirs)]
    assert to_jsonable(result.summaries) == to_jsonable(summaries)
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
    assert "| pooled | open-weight, greedy | 2 |" in markdown
    assert "| pooled | open-weight, sampled | 1 |" in markdown
    seed_rows = [r for r in all_rows if r["row"] == "seed"]
    assert [(int(r["seed"]), float(r["S"])) for r in seed_rows] == [
        (k, p.S) for k, p in sampled.per_seed.items()
    ]
    # The diagnostics table: S of the other pairs, then Gamma.
    pairs = " | ".join(
        f"{full.pairs[p].S:.1f}" for p in ("second", "reviewer", "expert", "sealed", "oracle")
    )
    assert f"| tiny-a | musique | greedy | {pairs} | {full.gamma.gamma:.1f} |" in markdown


def test_run_report_draws_every_figure_as_png_and_pdf(tmp_path, run_dirs):
    stats_dir, report_dir = tmp_path / "stats", tmp_path / "report"
    written = run_stats(StatsOptions(run_dirs, out=stats_dir, n_boot=500)).written
    result = run_report(ReportOptions([stats_dir], out=report_dir))
    stems = ("s_vs_l", "flip_composition", "delegation", "oracle")
    figures = [report_dir / f"{stem}.{f}" for stem in stems for f in ("png", "pdf")]
    assert result.written == [*figures, report_dir / "report.html"]
    for stem in stems:
        assert (report_dir / f"{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", stem
        assert (report_dir / f"{stem}.pdf").read_bytes()[:5] == b"%PDF-", stem
    assert to_jsonable(result.summaries) == to_jsonable(read_stats(written[0]))
    # Straight from a run directory too, summarised as run_stats would.
    direct = run_report(ReportOptions([run_dirs[1]], out=tmp_path / "direct", n_boot=200))
    (alone,) = [summarize(t, n_boot=200) for t in load_experiments([run_dirs[1]])]
    assert to_jsonable(direct.summaries) == to_jsonable([alone])
    assert (tmp_path / "direct" / "s_vs_l.png").is_file()


def test_a_directory_that_is_neither_a_run_nor_a_stats_output_is_named(tmp_path):
    (tmp_path / "bare").mkdir()
    with pytest.raises(RecordsError, match=r"bare: holds no stats.json .* and no manifest.json"):
        run_report(ReportOptions([tmp_path / "bare"], out=tmp_path / "r"))
    with pytest.raises(RecordsError, match=r"bare/manifest.json: missing"):
        run_stats(StatsOptions([tmp_path / "bare"], out=tmp_path / "o"))
    assert not (tmp_path / "o").exists() and not (tmp_path / "r").exists()


def test_a_step_that_fails_after_the_tables_leaves_nothing_written(tmp_path, runs):
    # The signals are read last; a malformed one must not leave stats.json written without
    # grounding.json (every file of a `nudge stats` output is written together, or none).
    lines = runs.records_from_arrays(
        {
            "s": np.array([1, 0]),
            "base": np.array([0, 1]),
            "conf": np.array([0, 1]),
            "doubt": np.array([1, 1]),
        }
    )
    b = json.loads(lines[1])
    b["signals"] = ["not", "an", "object"]
    lines[1] = json.dumps(b)
    run = runs.write_run_dir(tmp_path / "run", lines)
    with pytest.raises(RecordsError, match=r"run/records.jsonl:2: field signals must be an object"):
        run_stats(StatsOptions([run], out=tmp_path / "o", n_boot=50))
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_an_experiment_without_competence_labels_is_a_warning_told_as_it_arises(tmp_path, runs):
    arrays = {
        "s": np.array([-1, -1]),
        "base": np.array([0, 1]),
        "conf": np.array([0, 1]),
        "doubt": np.array([1, 1]),
    }
    run = runs.write_run_dir(tmp_path / "run", runs.records_from_arrays(arrays))
    told = []
    result = run_stats(StatsOptions([run], out=tmp_path / "o", n_boot=50), warn=told.append)
    assert told == result.warnings and len(told) == 1
    assert told[0].startswith("tiny / musique / greedy: no NT record has a grade")


def test_profile_thresholds_are_options_and_the_rule_is_printed(tmp_path, run_dirs):
    out = tmp_path / "stats"
    rule = ProfileRule(0, 7.5)
    run_stats(StatsOptions(run_dirs[:2], out=out, n_boot=500, profile_rule=rule))
    markdown = (out / "table.md").read_text()
    assert "min |S| = 0 pp, min |L| = 7.5 pp" in markdown
    assert "% Profile rule (95% intervals, min |S| = 0 pp" in (out / "table.tex").read_text()
    rows = [r for r in csv.DictReader(io.StringIO((out / "table.csv").read_text()))]
    for row, e in zip([r for r in rows if r["row"] == "experiment"], read_stats(out), strict=True):
        assert e.profile_rule == rule
        assert row["profile"] == rule.label(e.S, e.S_ci, e.L, e.L_ci)
    # The pooled SELF->TOOL share beside the medians: all flip events of both experiments summed.
    flips = [e.primary.flips for e in read_stats(out)]
    stt = sum(f.self_to_tool_well + f.self_to_tool_ill for f in flips)
    pooled = next(r for r in rows if r["row"] == "median" and r["task"] == "pooled")
    assert (int(pooled["self_to_tool_flips"]), int(pooled["pooled_flips"])) == (
        stt,
        sum(f.flips for f in flips),
    )
    assert f"({stt}/{sum(f.flips for f in flips)})" in markdown
