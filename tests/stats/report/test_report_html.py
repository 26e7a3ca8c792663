"""report.html in a real browser: Debian's chromium, headless (tests/helpers/chromium.py).

The DOM after the page's scripts ran is checked against values computed here from the records
the test writes: a table cell, a problem's arms, the count a filter leaves, a search by id. A
screenshot is written next to the test output and its path printed. Where chromium is missing
the browser tests skip and say so; the page's own content is checked without it.
"""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from helpers import chromium
from helpers import synthetic_run as synthetic

from nudgeability.stats.report.html.data import browser_data
from nudgeability.stats.report.pipeline import ReportOptions, StatsOptions, run_report, run_stats

needs_chromium = pytest.mark.skipif(
    chromium.find_chromium() is None,
    reason="chromium is not installed (apt-get install -y chromium): the browser test cannot run",
)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A run with every condition (40 problems), its stats and its report; the records."""
    tmp = tmp_path_factory.mktemp("html")
    arrays = synthetic.paper_arrays(np.random.default_rng(8), 40)
    run = synthetic.write_run(tmp / "run", synthetic.records(arrays), model="m")
    run_stats(StatsOptions([run], out=tmp / "stats", n_boot=200))
    written = run_report(ReportOptions([tmp / "stats"], out=tmp / "report")).written
    page = tmp / "report" / "report.html"
    assert page in written
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    return page, records


def _problems(records):
    found = {}
    for r in records:
        found.setdefault(r["problem_id"], {})[r["condition"]] = r
    return found


def test_the_page_is_self_contained(report):
    page, _ = report
    text = page.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text)  # nothing fetched
    assert '<script id="data" type="application/json">' in text
    for name in ("table1.md", "table6.md", "table9.md", "sealed.md", "summaries.md"):
        assert f'data-file="{name}"' in text
    assert text.count('src="data:image/png;base64,') >= 4  # the figures, inline


def test_the_browser_data_holds_every_arm(report):
    page, records = report
    data = browser_data([page.parent.parent / "run"])
    (experiment,) = data["experiments"]
    rows = {row[0]: row for row in experiment["rows"]}
    for pid, conditions in _problems(records).items():
        arms = {c: r["action"]["kind"] for c, r in conditions.items() if c not in ("NT", "B")}
        assert {c: a[0] for c, a in rows[pid][7].items()} == arms
    assert data["provenance"][0]["cohort"] == "open-weight"


@needs_chromium
def test_chromium_shows_a_table_cell_and_a_problems_arms(report, tmp_path_factory):
    page, records = report
    dom = chromium.dump_dom(page, "problem=p0003")
    # Table 6's B delegation rate, counted here: TOOL among completed B actions
    kinds = [r["action"]["kind"] for r in records if r["condition"] == "B"]
    rate = 100 * kinds.count("TOOL") / sum(k in ("SELF", "TOOL", "OTHER") for k in kinds)
    table6 = dom[dom.index('data-file="table6.md"') :]
    table6 = table6[: table6.index("</table>")]
    assert f"<td>{rate:.1f} [" in table6
    # the selected problem and each of its arms, with its action
    assert '<h3 id="problem-id">p0003</h3>' in dom
    conditions = _problems(records)["p0003"]
    arms = re.findall(r'<div class="arm" data-code="([^"]+)">.*?<span class="tag (\w+)">', dom)
    expected = [(c, r["action"]["kind"]) for c, r in conditions.items() if c not in ("NT", "B")]
    assert sorted(arms) == sorted(expected)
    shot = chromium.screenshot(page, tmp_path_factory.getbasetemp() / "report-screenshot.png")
    print(f"screenshot: {shot}")


def _count(dom: str) -> int:
    return int(re.search(r'id="status" data-count="(\d+)"', dom).group(1))


@needs_chromium
def test_chromium_filters_and_searches(report):
    page, records = report
    problems = _problems(records)
    # well-targeted doubt flips on unaided failures: B answered SELF, doubt sent it to the tool
    expected = 0
    for conditions in problems.values():
        nt, b, doubt = (conditions.get(c) for c in ("NT", "B", "doubt"))
        wrong = nt["grade"]["correct"] is False
        if (
            wrong
            and b
            and doubt
            and (b["action"]["kind"], doubt["action"]["kind"]) == ("SELF", "TOOL")
        ):
            expected += 1
    assert expected > 0
    assert _count(chromium.dump_dom(page, "filter=cond:doubt,flip:well,unaided:wrong")) == expected
    tool_arms = sum(
        any(r["action"]["kind"] == "TOOL" for c, r in conds.items() if c not in ("NT", "B"))
        for conds in problems.values()
    )
    assert _count(chromium.dump_dom(page, "filter=action:TOOL")) == tool_arms
    assert _count(chromium.dump_dom(page, "filter=q:p001")) == sum("p001" in p for p in problems)


def test_without_chromium_the_browser_test_says_so(monkeypatch):
    """The skip is real: with no chromium on PATH the helper finds none (never a fake pass)."""
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert chromium.find_chromium() is None
    with pytest.raises(chromium.ChromiumError, match="no chromium"):
        chromium.dump_dom(__import__("pathlib").Path("x.html"))


def test_the_browser_shows_what_the_run_recorded(tmp_path):
    """Question, gold, the inserted sentence and B's cut come from the run directory (the
    manifest's `shown`, the B record's `cut`), values written here by hand; a run without them
    shows none, and B's whole text before the cut."""
    from nudgeability.models.families.action import Action
    from nudgeability.splice.rundir.records import Record

    def record(condition, text, cut=None, sentence_id=None):
        return Record(
            problem_id="q1",
            task="strategyqa",
            condition=condition,
            sentence_id=sentence_id,
            seed=0,
            prompt_tokens=3,
            prompt_sha256="0" * 64,
            prefix_tokens=None if condition == "B" else 2,
            boundary=2 if condition == "B" else None,
            generated_ids=[1, 2, 3],
            text=text,
            finish_reason="eos",
            action=Action(kind="SELF", answer="yes"),
            grade=None,
            cut=cut,
        ).to_json()

    # the cut is where the record says, not where a think-close marker first shows in the text
    lines = [record("B", "I think </think> so. <end>yes", cut=13), record("conf", "ok", None, "c1")]
    shown = {
        "problems": {"q1": {"question": "Is water wet?", "gold": True}},
        "sentences": {"conf": "I am sure."},
    }
    run = synthetic.write_run(tmp_path / "run", lines, task="strategyqa")
    old = synthetic.write_run(tmp_path / "old", lines[:1], task="strategyqa", model="old")
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps(manifest | {"shown": shown}))
    data = browser_data([run, old])
    new, before = data["experiments"]
    (row,) = new["rows"]
    assert row[2:4] == ["Is water wet?", "yes"]
    assert row[6][2:4] == ["I think </thi", "nk> so. <end>yes"]
    assert new["sentences"] == {"conf": "I am sure."}
    (row,) = before["rows"]
    assert row[2:4] == ["", ""] and before["sentences"] == {}
    old_b = json.loads(lines[0])
    del old_b["cut"]  # a record written before the field existed
    (old / "records.jsonl").write_text(json.dumps(old_b) + "\n")
    (row,) = browser_data([old])["experiments"][0]["rows"]
    assert row[6][2:4] == ["I think </think> so. <end>yes", ""]
