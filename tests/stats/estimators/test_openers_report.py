"""The opener checks through `nudge stats` and `nudge report`: a run whose sealed arms carry P(TOOL)
gets `openers` in stats.json, its table in report.html, read back equal; a run without
likelihoods writes neither."""

from __future__ import annotations

import json

import numpy as np
from helpers.synthetic_run import record_line, write_run

from nudgeability.stats.report.document import read_openers
from nudgeability.stats.report.pipeline import ReportOptions, StatsOptions, run_report, run_stats


def _lines(likelihoods: bool) -> list[str]:
    rng = np.random.default_rng(5)
    lines = []
    for i in range(10):
        pid = f"p{i}"
        lines.append(record_line(pid, "NT", "SELF", graded=True, correct=bool(i % 2)))
        lines.append(record_line(pid, "B", "SELF", boundary=4, graded=True, correct=True))
        lines.append(record_line(pid, "conf", "SELF", graded=True, correct=True))
        lines.append(record_line(pid, "doubt", "TOOL"))
        for code in ("sealed_conf", "sealed_doubt"):
            p_tool = float(rng.uniform(0.1, 0.6))
            kind = "TOOL" if rng.uniform() < p_tool else "SELF"
            extra = dict(splice_logprob=-2.0, openers=(p_tool, 0.3)) if likelihoods else {}
            lines.append(record_line(pid, code, kind, graded=kind == "SELF", **extra))
    return lines


def test_a_run_with_opener_probabilities_gets_their_table(tmp_path):
    conditions = ["NT", "B", "conf", "doubt", "sealed_conf", "sealed_doubt"]
    found = {}
    for name in ("scored", "plain"):
        run = write_run(tmp_path / name, _lines(name == "scored"), conditions=conditions)
        stats = run_stats(StatsOptions([run], out=tmp_path / f"{name}-stats", n_boot=200))
        report = run_report(ReportOptions([tmp_path / f"{name}-stats"], out=tmp_path / f"{name}-r"))
        found[name] = (stats, report)

    stats, report = found["scored"]
    (experiment,) = stats.openers
    assert [c.condition for c in experiment.checks] == ["sealed_conf", "sealed_doubt"]
    assert all(c.n_rows == 10 and abs(c.p_answer - 0.3) < 1e-12 for c in experiment.checks)
    out = stats.written[0].parent
    assert "openers" in json.loads((out / "stats.json").read_text())
    assert (out / "openers.md").is_file() and (out / "openers.csv").is_file()
    assert read_openers(out) == stats.openers == report.openers
    page = report.written[-1].read_text()
    assert "Exact P(TOOL) right after the think-close" in page

    stats, report = found["plain"]
    out = stats.written[0].parent
    assert stats.openers == [] and "openers" not in json.loads((out / "stats.json").read_text())
    assert not (out / "openers.md").exists()
    assert "Exact P(TOOL)" not in report.written[-1].read_text()
