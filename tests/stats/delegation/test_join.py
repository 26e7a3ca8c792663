"""Run directories with resolutions -> delegation-value tables, stats.json, tables and the figure."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nudgeability.models.families.action import Action
from nudgeability.splice.rundir.records import GradeRecord, ResolutionRecord
from nudgeability.stats.delegation.join import load_value_tables
from nudgeability.stats.records import RecordsError
from nudgeability.stats.report.document import read_values
from nudgeability.stats.report.pipeline import ReportOptions, StatsOptions, run_report, run_stats
from nudgeability.stats.report.serialize import to_jsonable


def _resolution(problem_id, condition, *, executed=True, kind="SELF", correct=None) -> str:
    action = None if not executed else Action(kind=kind, answer="x" if kind == "SELF" else None)
    grade = GradeRecord(em=None, f1=None, correct=correct) if kind == "SELF" and executed else None
    return ResolutionRecord(
        problem_id=problem_id,
        task="musique",
        condition=condition,
        seed=0,
        source_sha256="0" * 64,
        tool_name="retrieve",
        arguments={"query": "q"},
        executed=executed,
        result_sha256="1" * 64 if executed else None,
        unresolved=None
        if executed
        else "not executed: 'retrieve' needs the string argument 'query'",
        prompt_tokens=30 if executed else None,
        prompt_sha256="2" * 64 if executed else None,
        generated_ids=[5, 6] if executed else [],
        text="..",
        finish_reason="eos" if executed else None,
        action=action,
        grade=grade,
    ).to_json()


@pytest.fixture
def resolved_dir(runs, tmp_path):
    line = runs.record_line
    records = [
        line("p0", "NT", "SELF", graded=True, correct=True),
        line("p0", "B", "SELF", graded=True, correct=True, boundary=9),
        line("p0", "conf", "SELF", graded=True, correct=True),
        line("p0", "doubt", "TOOL"),
        line("p1", "NT", "SELF", graded=True, correct=False),
        line("p1", "B", "TOOL", boundary=9),
        line("p1", "conf", "TOOL"),
        line("p1", "doubt", "TOOL"),
        line("p2", "NT", "TRUNC", graded=True, correct=None),
        line("p2", "B", "SELF", graded=True, correct=False, boundary=9),
        line("p2", "conf", "OTHER"),
        line("p2", "doubt", "SELF", graded=True, correct=None),
    ]
    path = runs.write_run_dir(tmp_path / "run", records)
    resolutions = [
        _resolution("p0", "doubt", correct=True),
        _resolution("p1", "B", correct=False),
        _resolution("p1", "conf", executed=False),
        _resolution("p1", "doubt", kind="TOOL"),  # a second call: recorded, not executed
    ]
    (path / "resolutions.jsonl").write_text("".join(r + "\n" for r in resolutions))
    return path


def test_the_join_reads_final_outcomes_by_the_rules(resolved_dir):
    (table,) = load_value_tables([resolved_dir])
    # worked by hand from the records above
    assert table.s.tolist() == [1, 0, -1]
    assert table.final["NT"].tolist() == [1, 0, 0]  # NT truncated: wrong
    assert table.final["B"].tolist() == [1, 0, 0]
    assert table.final["conf"].tolist() == [1, 0, 0]  # not executed, OTHER: wrong
    assert table.final["doubt"].tolist() == [1, 0, 0]  # second call, ungradeable: wrong
    assert table.tool_resolved["retrieve"].tolist() == [1, 2, 0]  # executed resolutions only
    assert table.tool_right["retrieve"].tolist() == [1, 0, 0]


def test_a_run_without_resolutions_gives_no_table(runs, tmp_path):
    path = runs.write_run_dir(tmp_path / "plain", [runs.record_line("p0", "NT", "SELF")])
    assert load_value_tables([path]) == []


def test_a_resolution_of_a_record_that_is_not_tool_is_an_error(resolved_dir):
    with (resolved_dir / "resolutions.jsonl").open("a") as handle:
        handle.write(_resolution("p0", "conf", correct=True) + "\n")
    with pytest.raises(RecordsError, match=r"resolutions\.jsonl:5: .*'conf'.* not a TOOL record"):
        load_value_tables([resolved_dir])


def test_stats_and_report_add_delegation_value(resolved_dir, tmp_path):
    stats_dir, report_dir = tmp_path / "stats", tmp_path / "report"
    result = run_stats(StatsOptions([resolved_dir], out=stats_dir, n_boot=200))
    assert [p.name for p in result.written][-3:] == [
        "delegation_value.md",
        "delegation_value.csv",
        "delegation_value.tex",
    ]
    document = json.loads((stats_dir / "stats.json").read_text())
    (value,) = document["delegation_value"]
    assert value["accuracy"]["NT"]["right"] == 1 and value["accuracy"]["NT"]["retained"] == 3
    assert value["tools"]["retrieve"]["resolved"] == 3 and value["tools"]["retrieve"]["right"] == 1
    assert value["swing"]["first"]["V"] == 0.0 and value["swing"]["first"]["n_V"] == 3
    assert value["flips"]["first"]["F"] == 1  # p0's doubt arm: SELF -> TOOL, right both times
    markdown = (stats_dir / "delegation_value.md").read_text()
    assert "| tiny | musique | greedy | first |" in markdown
    csv_lines = (stats_dir / "delegation_value.csv").read_text().splitlines()
    assert csv_lines[0] == "section,model,task,decoding,name,estimate,value,low,high,n"
    assert "\\begin{tabular}" in (stats_dir / "delegation_value.tex").read_text()
    stored = read_values(stats_dir)
    assert to_jsonable(stored) == document["delegation_value"] == to_jsonable(result.values)
    drawn = run_report(ReportOptions([stats_dir], out=report_dir)).written
    assert {p.name for p in drawn} >= {"delegation_value.png", "delegation_value.pdf"}
    assert (report_dir / "delegation_value.png").stat().st_size > 0
    assert (report_dir / "delegation_value.pdf").stat().st_size > 0
    assert np.isfinite(value["accuracy"]["B"]["ci"]["low"])
