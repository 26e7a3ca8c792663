"""Reading the uncertainty signals back from a run directory: values, alignment, samples apart
from arms, and one-line errors naming the file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nudgeability.stats import RecordsError, load_experiments
from nudgeability.stats.grounding.join import load_signals


def _run(tmp_path, runs, *, hidden_file="signals/B-s0-c00000.npy", row_shift=0):
    lines = []
    states = np.arange(12, dtype=np.float16).reshape(3, 4)
    for i in range(3):
        pid = f"p{i}"
        lines.append(runs.record_line(pid, "NT", "SELF", graded=True, correct=i != 1))
        for k, key in enumerate(["yes", "yes" if i else None, "no", "yes"]):
            sample = json.loads(runs.record_line(pid, "NT", "SELF", graded=True, correct=True))
            sample.update(condition="consistency", sample=k, signals={"answer_key": key})
            lines.append(json.dumps(sample))
        b = json.loads(runs.record_line(pid, "B", "SELF", graded=True, correct=True, boundary=5))
        b["signals"] = {
            "entropy_mean": 0.5 + i,
            "entropy_max": 2.0 + i,
            "nll_mean": 0.1 * i,
            "tokens": 5,
            "hidden": {"file": hidden_file, "row": 2 - i + row_shift},
        }
        lines.append(json.dumps(b))
        lines.append(runs.record_line(pid, "conf", "SELF", boundary=40))
        lines.append(runs.record_line(pid, "doubt", "TOOL", boundary=40))
    run = runs.write_run_dir(tmp_path / "run", lines)
    (run / "signals").mkdir()
    np.save(run / "signals" / "B-s0-c00000.npy", states)
    return run, states


def test_signals_are_aligned_with_the_table_rows_and_samples_are_not_arms(tmp_path, runs):
    run, states = _run(tmp_path, runs)
    (table,) = load_experiments([run])
    assert set(table.arms) == {"conf", "doubt"}  # the consistency samples are no arm
    assert table.s.tolist() == [1, 0, 1]
    rows = list(zip(table.problem_ids, table.seed.tolist()))
    data = load_signals([run], table.label.key, rows)
    assert data.samples == 4
    assert data.raw["entropy_mean"].tolist() == [0.5, 1.5, 2.5]
    assert data.raw["entropy_max"].tolist() == [2.0, 3.0, 4.0]
    assert data.raw["nll_mean"].tolist() == pytest.approx([0.0, 0.1, 0.2])
    # p0: yes, None, no, yes -> 2/4; p1, p2: yes, yes, no, yes -> 3/4
    assert data.raw["consistency"].tolist() == [0.5, 0.75, 0.75]
    np.testing.assert_array_equal(data.hidden, states[::-1].astype(np.float32))


@pytest.mark.parametrize(
    "options, message",
    [
        ({"hidden_file": "signals/missing.npy"}, r"signals/missing\.npy: cannot read"),
        ({"row_shift": 1}, r"row 3 is out of range \(the file has 3\)"),
    ],
)
def test_a_broken_hidden_reference_is_one_line_naming_the_file(tmp_path, runs, options, message):
    run, _ = _run(tmp_path, runs, **options)
    (table,) = load_experiments([run])
    rows = list(zip(table.problem_ids, table.seed.tolist()))
    with pytest.raises(RecordsError, match=message) as error:
        load_signals([run], table.label.key, rows)
    assert "\n" not in str(error.value)


def test_a_repeated_sample_is_a_duplicate_record(tmp_path, runs):
    run, _ = _run(tmp_path, runs)
    lines = (run / "records.jsonl").read_text().splitlines()
    sample = next(line for line in lines if '"consistency"' in line)
    (run / "records.jsonl").write_text("\n".join(lines + [sample]) + "\n")
    with pytest.raises(RecordsError, match="duplicate record"):
        load_experiments([run])
