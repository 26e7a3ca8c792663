"""The join from run directories (runner's record schema) to experiment tables, and its errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from nudgeability.stats import NONE, SELF, TOOL, TRUNC, RecordsError, load_experiments, summarize

from_arrays_conditions = ("conf", "doubt", "empty", "neutral", "sealed_conf", "sealed_doubt")


def _planted_with_arms(planted, rng, n):
    arrays = planted.sample(rng, n)
    extra = planted.sample(rng, n)
    unclosed = (arrays["base"] == TRUNC) & (arrays["conf"] == NONE)
    for code, source in (
        ("empty", "conf"),
        ("neutral", "doubt"),
        ("sealed_conf", "conf"),
        ("sealed_doubt", "doubt"),
    ):
        arrays[code] = np.where(unclosed, NONE, extra[source]).astype(np.int8)
    return arrays


def test_records_join_back_into_the_arrays_they_were_written_from(tmp_path, planted, runs):
    rng = np.random.default_rng(0)
    arrays = _planted_with_arms(planted, rng, 150)
    base_correct = np.where(arrays["base"] == SELF, rng.integers(-1, 2, 150), -1).astype(np.int8)
    run = runs.write_run_dir(
        tmp_path / "run", runs.records_from_arrays(arrays, base_correct=base_correct)
    )
    (table,) = load_experiments([run])
    assert table.label.key == ("tiny", "musique", "greedy")
    assert table.problem_ids == tuple(f"p{i:04d}" for i in range(150))
    np.testing.assert_array_equal(table.s, arrays["s"])
    np.testing.assert_array_equal(table.base, arrays["base"])
    assert set(table.arms) == set(from_arrays_conditions)
    for code in from_arrays_conditions:
        np.testing.assert_array_equal(table.arms[code], arrays[code], err_msg=code)
    np.testing.assert_array_equal(table.correct["B"], base_correct)
    assert not table.is_clustered and table.n_problems == 150


def test_unknown_competence_missing_records_and_unclosed_bases(tmp_path, runs):
    line = runs.record_line
    lines = [
        # p0: NT truncated (its grade would say correct: still unknown); B SELF graded wrong
        line("p0", "NT", "TRUNC", graded=True, correct=True),
        line("p0", "B", "SELF", graded=True, correct=False, boundary=9),
        line("p0", "conf", "TOOL"),
        line("p0", "doubt", "TOOL"),
        # p1: no NT record at all; B never closed (boundary null): its stray arm records are ignored
        line("p1", "B", "TRUNC", boundary=None),
        line("p1", "conf", "SELF"),
        # p2: NT ungradeable; no doubt record; oracle base SELF graded right, its arm spliced
        line("p2", "NT", "SELF", graded=True, correct=None),
        line("p2", "B", "TOOL", boundary=3),
        line("p2", "conf", "OTHER"),
        line("p2", "oracle_B", "SELF", graded=True, correct=True, boundary=5),
        line("p2", "oracle_conf", "TOOL"),
        # p3: NT right; oracle base never closed: oracle arms dropped, scoped arms kept
        line("p3", "NT", "SELF", graded=True, correct=True),
        line("p3", "B", "SELF", boundary=4),
        line("p3", "doubt", "SELF"),
        line("p3", "oracle_B", "TRUNC", boundary=None),
        line("p3", "oracle_conf", "SELF"),
    ]
    (table,) = load_experiments([runs.write_run_dir(tmp_path / "run", lines)])
    assert table.s.tolist() == [-1, -1, -1, 1]
    assert table.base.tolist() == [SELF, TRUNC, TOOL, SELF]
    assert table.arms["conf"].tolist() == [TOOL, NONE, 2, NONE]
    assert table.arms["doubt"].tolist() == [TOOL, NONE, NONE, SELF]
    assert table.arms["oracle_B"].tolist() == [NONE, NONE, SELF, TRUNC]
    assert table.arms["oracle_conf"].tolist() == [NONE, NONE, TOOL, NONE]
    assert table.correct["B"].tolist() == [0, -1, -1, -1]
    assert table.correct["oracle_B"].tolist() == [-1, -1, 1, -1]


def test_seeds_become_rows_clustered_by_problem(tmp_path, runs):
    line = runs.record_line
    lines = [
        line(f"p{p}", c, k, seed=seed, graded=c == "NT", correct=True, boundary=2)
        for seed in (2, 0, 1)
        for p in (1, 0)
        for c, k in (("NT", "SELF"), ("B", "SELF"), ("conf", "SELF"), ("doubt", "TOOL"))
    ]
    run = runs.write_run_dir(tmp_path / "run", lines, decoding="sampled", seeds=(0, 1, 2))
    (table,) = load_experiments([run])
    assert (
        table.problem_ids == ("p1",) * 3 + ("p0",) * 3
    )  # problems by first appearance, seeds ascending
    assert table.seed.tolist() == [0, 1, 2, 0, 1, 2]
    assert table.cluster.tolist() == [0, 0, 0, 1, 1, 1]
    assert table.is_clustered and table.seeds == (0, 1, 2) and table.n_problems == 2


def test_run_dirs_of_one_experiment_are_joined_and_different_experiments_kept_apart(tmp_path, runs):
    line = runs.record_line
    part1 = runs.write_run_dir(
        tmp_path / "a",
        [line("p0", "NT", "SELF", graded=True, correct=False), line("p0", "B", "SELF", boundary=1)],
    )
    part2 = runs.write_run_dir(
        tmp_path / "b", [line("p0", "conf", "SELF"), line("p0", "doubt", "TOOL")]
    )
    other = runs.write_run_dir(
        tmp_path / "c",
        [line("q0", "NT", "SELF", task="strategyqa", graded=True, correct=True)],
        task="strategyqa",
    )
    first, second = load_experiments([part1, other, part2])
    assert (
        first.label.task == "musique"
        and first.arms["doubt"].tolist() == [TOOL]
        and first.s.tolist() == [0]
    )
    assert second.label.task == "strategyqa" and second.s.tolist() == [1]
    with pytest.raises(
        RecordsError,
        match=r"b/records.jsonl:1: duplicate record .* \(first at .*b/records.jsonl:1\)",
    ):
        load_experiments([part2, part2])


def test_a_line_that_is_not_json_is_reported_with_file_and_line(tmp_path, runs):
    lines = [
        runs.record_line("p0", "NT", "SELF"),
        "{not json",
        runs.record_line("p1", "NT", "SELF"),
    ]
    run = runs.write_run_dir(tmp_path / "run", lines)
    with pytest.raises(RecordsError, match=r"run/records.jsonl:2: not valid JSON"):
        load_experiments([run])


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r.pop("action"), r"records.jsonl:1: missing field\(s\) action"),
        (
            lambda r: r["action"].update(kind="MAYBE"),
            r"records.jsonl:1: field action.kind: unknown action kind 'MAYBE'",
        ),
        (lambda r: r.update(seed="0"), r"records.jsonl:1: field seed must be a int"),
        (
            lambda r: r.update(seed=4),
            r"records.jsonl:1: seed 4 is not among the manifest's seeds \[0\]",
        ),
        (
            lambda r: r.update(task="strategyqa"),
            r"records.jsonl:1: task 'strategyqa' but the manifest says 'musique'",
        ),
        (lambda r: r.update(grade=True), r"records.jsonl:1: field grade must be null or an object"),
    ],
)
def test_malformed_records_name_the_file_line_and_field(tmp_path, runs, mutate, message):
    record = json.loads(runs.record_line("p0", "NT", "SELF"))
    mutate(record)
    run = runs.write_run_dir(tmp_path / "run", [json.dumps(record)])
    with pytest.raises(RecordsError, match=message):
        load_experiments([run])


def test_run_dir_without_manifest_or_records_is_an_error_naming_the_path(tmp_path, runs):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RecordsError, match=r"empty/manifest.json: missing"):
        load_experiments([tmp_path / "empty"])
    run = runs.write_run_dir(tmp_path / "run", [])
    (run / "records.jsonl").unlink()
    with pytest.raises(RecordsError, match=r"run/records.jsonl: missing"):
        load_experiments([run])
    (run / "manifest.json").write_text(
        json.dumps({"experiment": {"model": "m", "task": "musique"}})
    )
    with pytest.raises(RecordsError, match=r"manifest.json: field experiment.decoding"):
        load_experiments([run])
    with pytest.raises(RecordsError, match="not a directory"):
        load_experiments([tmp_path / "nowhere"])


def test_a_run_whose_bases_never_closed_summarises_with_nothing_retained(tmp_path, runs):
    # Every B truncated inside its thinking: the runner writes no arm records at all. The manifest
    # says conf and doubt were asked for, so the table still has them (all -1) and the summary
    # reports n_S = 0 with undefined estimates instead of refusing the run.
    line = runs.record_line
    lines = [
        line("p0", "NT", "SELF", graded=True, correct=True),
        line("p0", "B", "TRUNC", boundary=None),
        line("p1", "NT", "SELF", graded=True, correct=False),
        line("p1", "B", "TRUNC", boundary=None),
    ]
    run = runs.write_run_dir(
        tmp_path / "run", lines, conditions=["NT", "B", "conf", "doubt", "neutral"]
    )
    (table,) = load_experiments([run])
    assert table.arms["conf"].tolist() == table.arms["doubt"].tolist() == [NONE, NONE]
    summary = summarize(table, n_boot=200)
    assert summary.primary.n_S == 0 and summary.primary.F == 0
    assert math.isnan(summary.primary.S) and summary.profile == "undetermined"
    assert summary.unaided_accuracy.numerator == 1 and summary.unaided_accuracy.denominator == 2
