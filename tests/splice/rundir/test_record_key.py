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
        None,
    )
    sample = RecordKey.of({"problem_id": "q1", "condition": "consistency", "seed": 0, "sample": 3})
    assert sample == ("q1", "consistency", 0, 3, None)
    assert str(RecordKey("q1", "B", 0)) == "('q1', 'B', 0)"  # as messages have always read
    assert str(sample) == "('q1', 'consistency', 0, 3)"
    assert RecordKey("q1", "B", 0).compact == ("q1", "B", 0)


def test_the_key_of_an_arm_at_an_extra_cut_sorts_by_its_cut():
    keys = [
        RecordKey.of({"problem_id": "q1", "condition": "doubt", "seed": 0, "at": at})
        for at in (120, 7, 45)
    ]
    assert [key.at for key in sorted(keys, key=lambda k: k.compact)] == [7, 45, 120]
    assert str(keys[1]) == "('q1', 'doubt', 0, '@000007')"
