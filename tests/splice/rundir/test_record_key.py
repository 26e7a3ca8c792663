"""The record key (splice/rundir/records.py `RecordKey`), on hand-written records and
hand-written expected values."""

from __future__ import annotations

from nudgeability.splice.rundir.records import RecordKey


def test_the_record_key_of_a_record_and_of_a_self_consistency_sample():
    assert RecordKey.of({"problem_id": "q1", "condition": "B", "seed": 0, "x": 1}) == (
        "q1",
        "B",
        0,
        None,
    )
    sample = RecordKey.of({"problem_id": "q1", "condition": "consistency", "seed": 0, "sample": 3})
    assert sample == ("q1", "consistency", 0, 3)
    assert str(RecordKey("q1", "B", 0)) == "('q1', 'B', 0)"  # as messages have always read
    assert str(sample) == "('q1', 'consistency', 0, 3)"
    assert RecordKey("q1", "B", 0).compact == ("q1", "B", 0)
