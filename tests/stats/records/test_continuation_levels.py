"""Experiments continued below token level (a server's text- or chat-level splice) are marked in
the report and never joined with a token-level run of the same name; the cohort of the medians is
who serves the model (records/cohorts.py), not the continuation level."""

from __future__ import annotations

import json

import numpy as np

from nudgeability.cli import main
from nudgeability.stats import load_experiments


def _at_level(lines: list[str], level: str) -> list[str]:
    return [json.dumps({**json.loads(line), "continuation": level}) for line in lines]


def test_levels_stay_apart_and_are_marked(tmp_path, planted, runs):
    rng = np.random.default_rng(5)
    local = runs.write_run_dir(
        tmp_path / "local", runs.records_from_arrays(planted.sample(rng, 200)), model="m"
    )
    served = runs.write_run_dir(
        tmp_path / "served",
        _at_level(runs.records_from_arrays(planted.sample(rng, 200)), "text"),
        model="m",
    )
    manifest = json.loads((served / "manifest.json").read_text())
    manifest["experiment"]["continuation"] = "text"
    (served / "manifest.json").write_text(json.dumps(manifest))
    # a run whose manifest claims token level but whose records fell back to text (a server that
    # returned no ids): the records decide
    fell_back = runs.write_run_dir(
        tmp_path / "fell_back",
        _at_level(runs.records_from_arrays(planted.sample(rng, 200)), "text"),
        model="n",
    )

    tables = load_experiments([local, served, fell_back])
    assert [(t.label.model, t.label.continuation) for t in tables] == [
        ("m", "token"),
        ("m", "text"),
        ("n", "text"),
    ]
    assert [len(t) for t in tables] == [200, 200, 200]  # the two "m" runs were not joined

    out = tmp_path / "stats"
    assert main(["stats", str(local), str(served), "--out", str(out), "--n-boot", "200"]) == 0
    document = json.loads((out / "stats.json").read_text())
    assert [e["continuation"] for e in document["experiments"]] == ["token", "text"]
    # both are the user's own runs (no remote backend): one open-weight cohort, each row marked
    assert set(document["across"]) == {"open-weight, greedy"}
    table = (out / "table.md").read_text()
    assert "| m (text-level) |" in table and "| m | " in table
