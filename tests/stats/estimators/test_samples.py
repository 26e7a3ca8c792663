"""S over every sample of each arm (stats/estimators/samples.py), on records written here, against
shares and a bootstrap recomputed by plain loops over the same problem draws; and through
`nudge stats` and `nudge report`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.synthetic_run import record_line, write_run

from nudgeability.splice.rundir.records import Record
from nudgeability.stats.estimators.samples import sampled_pairs
from nudgeability.stats.report.document import read_samples
from nudgeability.stats.report.pipeline import ReportOptions, StatsOptions, run_report, run_stats
from nudgeability.stats.resampling.bootstrap import Resamples

KINDS = ("TOOL", "SELF", "OTHER", "TRUNC")


def _lines(samples: int, seed: int = 4) -> list[str]:
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(14):
        pid = f"p{i:02d}"
        for s in (0, 1):
            lines.append(record_line(pid, "NT", "SELF", seed=s, graded=True, correct=bool(i % 2)))
            lines.append(record_line(pid, "B", "SELF", seed=s, boundary=4, graded=True))
            for code, p_tool in (("conf", 0.2), ("doubt", 0.6)):
                for k in range(samples):
                    kind = "TOOL" if rng.uniform() < p_tool else str(rng.choice(KINDS[1:]))
                    data = json.loads(record_line(pid, code, kind, seed=s))
                    if k:
                        data["sample"] = k
                    lines.append(Record.from_dict(data).to_json())
    return lines


def test_s_over_samples_equals_a_loop_over_rows_and_problem_draws():
    records = [Record.from_json(line) for line in _lines(4)]
    found = {p.pair: p for p in sampled_pairs(records, n_boot=300, seed=9)}
    assert list(found) == ["first"]
    got = found["first"]
    done = ("SELF", "TOOL", "OTHER")
    rows = {}
    for r in records:
        if r.condition in ("conf", "doubt"):
            rows.setdefault((r.problem_id, r.seed), {}).setdefault(r.condition, []).append(r)
    kept, diffs, firsts = [], [], []
    for key, arms in rows.items():
        shares = {}
        for code in ("conf", "doubt"):
            kinds = [r.action.kind for r in arms[code] if r.action.kind in done]
            shares[code] = sum(k == "TOOL" for k in kinds) / len(kinds) if kinds else None
        if None in shares.values():
            continue
        kept.append(key)
        diffs.append(shares["doubt"] - shares["conf"])
        first = {c: next(r for r in arms[c] if r.sample is None).action.kind for c in arms}
        both = first["doubt"] in done and first["conf"] in done
        firsts.append((first["doubt"] == "TOOL") - (first["conf"] == "TOOL") if both else None)
    assert got.n_S == len(kept)
    assert got.S == pytest.approx(100 * sum(diffs) / len(diffs))
    draws = Resamples.draw(np.array([int(pid[1:]) for pid, _ in kept]), 300, 9)
    boot = []
    for r in range(300):
        w = [draws.counts[r, draws.unit[j]] for j in range(len(kept))]
        boot.append(100 * sum(wj * d for wj, d in zip(w, diffs)) / sum(w))
    assert (got.S_ci.low, got.S_ci.high) == pytest.approx(tuple(np.percentile(boot, [2.5, 97.5])))
    # Table 1's S on those rows: the first samples, where both completed
    complete = [f for f in firsts if f is not None]
    assert got.S_first == pytest.approx(100 * sum(complete) / len(complete))


def test_one_sample_per_arm_gives_no_view():
    assert sampled_pairs([Record.from_json(line) for line in _lines(1)]) == []


def test_the_samples_table_goes_through_stats_and_report(tmp_path):
    conditions = ["NT", "B", "conf", "doubt"]
    run = write_run(
        tmp_path / "run", _lines(3), decoding="sampled", seeds=(0, 1), conditions=conditions
    )
    stats = run_stats(StatsOptions([run], out=tmp_path / "stats", n_boot=200))
    report = run_report(ReportOptions([tmp_path / "stats"], out=tmp_path / "report"))
    out = tmp_path / "stats"
    assert [p.pair for e in stats.samples for p in e.pairs] == ["first"]
    assert "samples" in json.loads((out / "stats.json").read_text())
    assert (out / "samples.md").is_file()
    assert read_samples(out) == stats.samples == report.samples
    assert "S over every sample of each arm" in report.written[-1].read_text()
