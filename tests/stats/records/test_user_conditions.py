"""A run's own conditions reach the statistics as data read from its manifest, never through
process-wide state: two runs that give one code two meanings are read in one process, each
with its own (splice/experiment/conditions.py `ConditionSet`, stats/records/run_dirs.py)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import synthetic_run as synthetic

from nudgeability.splice.experiment.conditions import SHIPPED_CONDITIONS, UnknownConditionError
from nudgeability.splice.rundir.manifest import read_manifest
from nudgeability.stats import RecordsError
from nudgeability.stats.report.document import read_stats
from nudgeability.stats.report.pipeline import (
    ReportOptions,
    StatsOptions,
    run_report,
    run_stats,
)

KINDS = ("SELF", "TOOL", "OTHER", "TRUNC")


def _arm(code: str, side: str) -> dict:
    return {
        "code": code,
        "description": f"{code}, the {side} side",
        "base": "B",
        "text": code.replace("_", " "),
        "seal": False,
        "edit": None,
        "pair": "w",
        "side": side,
        "label": "",
    }


def _run(path, arrays, model: str, plus: str, minus: str):
    """A run directory whose interventions make `plus` the + side and `minus` the - side of `w`."""
    extra = {
        "interventions": [_arm(plus, "+"), _arm(minus, "-")],
        "inputs": {"interventions": {"path": "/elsewhere/mine.py", "sha256": "0" * 64}},
    }
    conditions = ["NT", "B", "conf", "doubt", "wait_a", "wait_b"]
    return synthetic.write_run(
        path, synthetic.records(arrays), model=model, conditions=conditions, manifest_extra=extra
    )


def _arrays(seed: int) -> dict[str, np.ndarray]:
    found = synthetic.paper_arrays(np.random.default_rng(seed), 60)
    keep = ("s", "base", "base_correct", "conf", "doubt")
    arrays = {k: found[k] for k in keep}
    rng = np.random.default_rng(seed + 1)
    for code in ("wait_a", "wait_b"):
        arrays[code] = rng.choice(
            np.array([-1, 0, 1, 2, 3], np.int8), 60, p=[0.1, 0.4, 0.3, 0.1, 0.1]
        )
    return arrays


def _brute_s(arrays, plus: str, minus: str) -> tuple[float, int]:
    """S of a pair by a loop: over the rows where both arms completed (SELF, TOOL or OTHER),
    100 x (TOOL's share under - less under +)."""
    done = [i for i in range(60) if arrays[plus][i] in (0, 1, 2) and arrays[minus][i] in (0, 1, 2)]
    tool_minus = sum(arrays[minus][i] == 1 for i in done)
    tool_plus = sum(arrays[plus][i] == 1 for i in done)
    return 100 * (tool_minus - tool_plus) / len(done), len(done)


def test_two_runs_giving_one_code_two_meanings_are_summarised_each_with_its_own(tmp_path):
    first, second = _arrays(1), _arrays(2)
    a = _run(tmp_path / "a", first, "m1", plus="wait_a", minus="wait_b")
    b = _run(tmp_path / "b", second, "m2", plus="wait_b", minus="wait_a")  # the sides swapped
    # reading a manifest changes nothing that another reader sees
    read_manifest(a), read_manifest(b)
    with pytest.raises(UnknownConditionError):
        SHIPPED_CONDITIONS.get("wait_a")
    found = run_stats(StatsOptions([a, b], out=tmp_path / "stats", n_boot=200))
    one, two = found.summaries
    assert (one.model, two.model) == ("m1", "m2")
    assert (one.pairs["w"].S, one.pairs["w"].n_S) == pytest.approx(
        _brute_s(first, "wait_a", "wait_b")
    )
    assert (two.pairs["w"].S, two.pairs["w"].n_S) == pytest.approx(
        _brute_s(second, "wait_b", "wait_a")
    )
    assert one.known.get("wait_a").side == "+" and two.known.get("wait_a").side == "-"
    assert "S w" in (tmp_path / "stats" / "table.md").read_text(encoding="utf-8")
    # stats.json carries each experiment's own definitions to `nudge report`
    again = read_stats(tmp_path / "stats")
    assert [e.known for e in again] == [one.known, two.known]
    report = run_report(ReportOptions([tmp_path / "stats"], out=tmp_path / "report"))
    assert [e.known for e in report.summaries] == [one.known, two.known]


def test_pooling_two_runs_that_define_a_code_otherwise_names_the_code_and_the_run(tmp_path):
    a = _run(tmp_path / "a", _arrays(1), "m", plus="wait_a", minus="wait_b")
    b = _run(tmp_path / "b", _arrays(2), "m", plus="wait_b", minus="wait_a")
    with pytest.raises(RecordsError) as caught:
        run_stats(StatsOptions([a, b], out=tmp_path / "stats", n_boot=200))
    message = str(caught.value)
    assert "'wait_a'" in message and str(b / "manifest.json") in message and "\n" not in message
    # kept apart by a label, they are two experiments and read
    labels = {a: "first", b: "second"}
    found = run_stats(StatsOptions([a, b], out=tmp_path / "stats", n_boot=200, labels=labels))
    assert [s.model for s in found.summaries] == ["m (first)", "m (second)"]
