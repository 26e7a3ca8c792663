"""An arms unit that lacks a record the plan calls for is caught and named: an arm may be absent
only when its base never closed its thinking. On resume such a part is damaged: it is set aside,
named in one line, and its unit recomputed (issue 12, item 4; the final assembly still refuses a
missing record should one ever reach it)."""

from __future__ import annotations

import json

from helpers.tiny_runs import nudge_run_args, read_records, run_nudge


def _run(model_dir, out):
    return run_nudge(
        nudge_run_args(
            model_dir, out, n=3, chunk_size=3, conditions="primary", max_new_tokens="24,8"
        )
    )


def test_a_missing_arm_record_is_named_and_its_unit_recomputed(tiny_checkpoint, tmp_path):
    model_dir = tiny_checkpoint("qwen3", close_boost=2.6)
    out = tmp_path / "out"
    status, err = _run(model_dir, out)
    assert status == 0, err
    first = (out / "records.jsonl").read_bytes()
    records = read_records(out)
    closed_b = {
        r["problem_id"] for r in records if r["condition"] == "B" and r["boundary"] is not None
    }
    assert closed_b  # the fixture closes some bases, so arms exist
    part = out / "parts" / "arms-s0-c00000.jsonl"
    lines = part.read_text(encoding="utf-8").splitlines()
    dropped = next(line for line in lines if json.loads(line)["condition"] == "doubt")
    problem = json.loads(dropped)["problem_id"]
    part.write_text("".join(line + "\n" for line in lines if line != dropped), encoding="utf-8")
    (out / "records.jsonl").unlink()

    status, err = _run(model_dir, out)
    assert status == 0, err
    (warning,) = [line for line in err.splitlines() if "arms-s0-c00000" in line]
    assert "doubt" in warning and problem in warning and "Traceback" not in err
    assert "(1 units computed" in err, err
    assert (out / "records.jsonl").read_bytes() == first
    assert len(list((out / "damaged").iterdir())) == 1


def test_arms_absent_because_the_base_never_closed_are_accepted(tiny_checkpoint, tmp_path):
    """Resuming a complete run reassembles the same records, arms missing only where B did not
    close."""
    model_dir = tiny_checkpoint("qwen3", close_boost=2.6)
    out = tmp_path / "out"
    assert _run(model_dir, out)[0] == 0
    first = (out / "records.jsonl").read_bytes()
    records = read_records(out)
    open_b = {r["problem_id"] for r in records if r["condition"] == "B" and r["boundary"] is None}
    assert open_b and not any(
        r["problem_id"] in open_b for r in records if r["condition"] == "conf"
    )
    (out / "records.jsonl").unlink()
    assert _run(model_dir, out)[0] == 0
    assert (out / "records.jsonl").read_bytes() == first
