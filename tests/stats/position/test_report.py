"""The by-position view through `nudge stats` and `nudge report` on hand-written run directories:
stats.json's `by_position` only for a run with extra cuts (and every other byte as without
them), its table, its figure in report.html, and the problem browser's extra cuts."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import chromium
from helpers.synthetic_run import cut_records, write_run

from nudgeability.splice.rundir.records import Record
from nudgeability.stats.position import position_tables, summarize_positions
from nudgeability.stats.records import gather_experiments
from nudgeability.stats.report.document import PAPER_TABLE_FILES, TABLE_FILES, read_positions
from nudgeability.stats.report.html.data import browser_data
from nudgeability.stats.report.pipeline import ReportOptions, StatsOptions, run_report, run_stats
from nudgeability.stats.report.serialize import to_jsonable

N_BOOT = 200


def _without_cuts(line: str) -> str:
    """The line a run without `--cuts` would have written: no `cuts` on a base."""
    data = json.loads(line)
    data.pop("cuts", None)
    return Record.from_dict(data).to_json()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A cuts run (three pairs, likelihoods) and the same run without its extra cuts, each with
    its stats and report."""
    tmp = tmp_path_factory.mktemp("position")
    lines = cut_records(
        np.random.default_rng(3), 40, pairs=("first", "second", "oracle"), likelihoods=True
    )
    plain_lines = [_without_cuts(x) for x in lines if json.loads(x).get("at") is None]
    out = {}
    for name, found in (("cuts", lines), ("plain", plain_lines)):
        run = write_run(tmp / name / "run", found, model="m")
        stats = run_stats(StatsOptions([run], out=tmp / name / "stats", n_boot=N_BOOT, seed=2))
        report = run_report(ReportOptions([tmp / name / "stats"], out=tmp / name / "report"))
        out[name] = (run, stats, report)
    return out


def test_a_run_without_cuts_has_no_by_position_and_the_same_files(runs):
    run, stats, report = runs["plain"]
    out = stats.written[0].parent
    assert stats.written == [
        out / name for name in ("stats.json", *TABLE_FILES, *PAPER_TABLE_FILES)
    ]
    assert stats.positions == [] and report.positions == []
    assert "by_position" not in json.loads((out / "stats.json").read_text())
    assert read_positions(out) == []
    assert not any("by_position" in path.name for path in report.written)
    page = (report.written[-1]).read_text()
    assert "by_position" not in page and "Extra cuts" not in page  # neither figure nor cuts.js


def test_extra_cuts_add_by_position_and_change_nothing_else(runs):
    cuts_doc = json.loads((runs["cuts"][1].written[0]).read_text())
    plain_doc = json.loads((runs["plain"][1].written[0]).read_text())
    by_position = cuts_doc.pop("by_position")
    for document in (cuts_doc, plain_doc):
        document.pop("run_dirs")
    assert cuts_doc == plain_doc  # the experiments, across, claims: as without the cuts
    # the other files too, byte for byte
    cuts_out, plain_out = runs["cuts"][1].written[0].parent, runs["plain"][1].written[0].parent
    for name in (*TABLE_FILES, *PAPER_TABLE_FILES):
        assert (cuts_out / name).read_bytes() == (plain_out / name).read_bytes(), name

    # by_position is summarize_positions of the experiment's records, as JSON
    (experiment,) = gather_experiments([runs["cuts"][0]])
    tables = position_tables(experiment.records, experiment.label, experiment.conditions)
    expected = summarize_positions(tables, n_boot=N_BOOT, seed=2)
    assert by_position == json.loads(json.dumps(to_jsonable([expected])))
    assert to_jsonable(read_positions(cuts_out)) == to_jsonable([expected])
    # the schema, as stats/README.md states it
    (entry,) = by_position
    assert {"model", "task", "decoding", "bins", "n_boot", "boot_seed", "points", "pairs"} <= set(
        entry
    )
    assert entry["pairs"] == ["first", "second", "oracle"] and entry["bins"] == 5
    paper = entry["points"][-1]
    assert paper["bin"]["paper"] and paper["bin"]["label"] == "paper cut (1)"
    first = paper["pairs"]["first"]
    assert {"S", "S_ci", "n_S", "WT", "WT_ci", "WTrand", "WTrand_ci", "L", "L_ci", "F"} <= set(
        first
    )
    assert first["S"] == cuts_doc["experiments"][0]["pairs"]["first"]["S"]
    assert {"pair", "n", "logprob_plus", "logprob_minus", "S"} == set(paper["likelihoods"]["first"])

    table = (cuts_out / "by_position.md").read_text()
    assert "(0.2, 0.4]" in table and "paper cut (1)" in table and "log p + (nats)" in table
    assert (cuts_out / "by_position.csv").is_file() and (cuts_out / "by_position.tex").is_file()


def test_the_report_draws_the_figure_and_shows_the_table(runs):
    _, _, report = runs["cuts"]
    out = report.written[-1].parent
    assert out / "by_position.png" in report.written and out / "by_position.pdf" in report.written
    page = (out / "report.html").read_text()
    assert 'alt="by_position"' in page and 'data-file="by_position.md"' in page
    assert page.count("<script>") == 2  # browser.js, then cuts.js


def test_the_browser_keeps_the_papers_arms_and_lists_the_extra_cuts(runs):
    run = runs["cuts"][0]
    records = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    (experiment,) = browser_data([run])["experiments"]
    rows = {row[0]: (i, row) for i, row in enumerate(experiment["rows"])}
    boundaries = {(r["problem_id"], r["condition"]): r.get("boundary") for r in records}
    parent = lambda code: "oracle_B" if code.startswith("oracle") else "B"  # noqa: E731
    expected_paper, expected_cuts = {}, {}
    for r in records:
        pid, code = r["problem_id"], r["condition"]
        if code in ("NT", "B"):
            continue
        if r.get("at") is None:
            expected_paper.setdefault(pid, {})[code] = r["action"]["kind"]
        else:
            base = parent(code)
            key = (r["at"], r["at"] / boundaries[(pid, base)], base)
            expected_cuts.setdefault(pid, {}).setdefault(key, {})[code] = r["action"]["kind"]
    for pid, (i, row) in rows.items():
        assert {c: a[0] for c, a in row[7].items()} == expected_paper.get(pid, {})
        found = {
            (at, relative, base): {c: a[0] for c, a in arms.items()}
            for at, relative, base, arms in experiment["cuts"].get(i, [])
        }
        assert found == expected_cuts.get(pid, {})
    assert sum(bool(c) for c in experiment["cuts"].values()) > 10


@pytest.mark.skipif(chromium.find_chromium() is None, reason="chromium is not installed")
def test_chromium_shows_a_problems_extra_cuts(runs):
    run, _, report = runs["cuts"]
    (experiment,) = browser_data([run])["experiments"]
    index = next(i for i, cuts in experiment["cuts"].items() if len(cuts) >= 2)
    row = experiment["rows"][int(index)]
    dom = chromium.dump_dom(report.written[-1].parent / "report.html", f"problem={row[0]}")
    assert f'<h3 id="problem-id">{row[0]}</h3>' in dom
    shown = dom[dom.index('<div class="cuts">') :]
    cuts = experiment["cuts"][index]
    assert f"Extra cuts ({len(cuts)})" in shown
    for at, _, base, arms in cuts:
        block = shown[shown.index(f'data-at="{at}" data-base="{base}"') :]
        for code, arm in arms.items():
            assert f'<div class="arm" data-code="{code}"><h4>' in block
            assert block.index(f'data-code="{code}"') < block.index("</pre>", block.index(code))
            assert f'<span class="tag {arm[0]}">' in block


def test_a_pair_this_process_does_not_know_is_kept_when_read_back(runs, tmp_path):
    """A user's pair (`--interventions`) is read back from stats.json by a `nudge report` that
    never loaded the file: the figure still draws it."""
    _, stats, _ = runs["cuts"]
    text = (stats.written[0].parent / "stats.json").read_text()
    (tmp_path / "stats.json").write_text(text.replace('"second"', '"zz_user"'))
    (position,) = read_positions(tmp_path)
    assert "zz_user" in position.pairs and "second" not in position.pairs
    assert position.pairs[:2] == ("first", "oracle")
