"""The plan of a run (splice/rundir/plan.py): chunks and shards, phases and units, the canonical
record order, and a `Plan` read from a manifest with the keys each unit must hold."""

from __future__ import annotations

import pytest

from nudgeability.splice.experiment.conditions import CONSISTENCY_CONDITION, parse_conditions
from nudgeability.splice.rundir.manifest import OutputDirError
from nudgeability.splice.rundir.plan import (
    Plan,
    Unit,
    canonical_keys,
    chunk_bounds,
    phases_of,
    shard_chunks,
    units_of,
)


def test_chunks_cover_the_problems_in_order_and_shards_partition_them():
    assert chunk_bounds(7, 3) == [range(0, 3), range(3, 6), range(6, 7)]
    assert shard_chunks(5, None) == [0, 1, 2, 3, 4]
    shards = [shard_chunks(5, (k, 3)) for k in (1, 2, 3)]
    assert shards == [[0, 3], [1, 4], [2]]


def test_phases_follow_the_protocol_order_and_units_walk_seed_then_chunk():
    assert phases_of(parse_conditions("NT")) == ["NT"]
    assert phases_of(parse_conditions("primary")) == ["NT", "B", "arms"]
    assert phases_of(parse_conditions("oracle_B")) == ["NT", "oracle_B"]
    assert phases_of(parse_conditions("all")) == ["NT", "B", "oracle_B", "arms"]
    assert units_of(["NT"], [0, 1], [2, 5]) == [
        Unit("NT", 0, 2),
        Unit("NT", 0, 5),
        Unit("NT", 1, 2),
        Unit("NT", 1, 5),
    ]
    assert Unit("arms", 1, 12).name == "arms-s1-c00012"


def test_canonical_order_is_problem_then_condition_then_seed():
    conditions = parse_conditions("B")  # NT, B
    assert list(canonical_keys(["p", "q"], conditions, [0, 1])) == [
        ("p", "NT", 0, None, None),
        ("p", "NT", 1, None, None),
        ("p", "B", 0, None, None),
        ("p", "B", 1, None, None),
        ("q", "NT", 0, None, None),
        ("q", "NT", 1, None, None),
        ("q", "B", 0, None, None),
        ("q", "B", 1, None, None),
    ]


def test_consistency_samples_follow_nt_and_are_listed_per_sample():
    conditions = parse_conditions("B")
    conditions = [conditions[0], CONSISTENCY_CONDITION, *conditions[1:]]
    assert phases_of(conditions) == ["NT", "consistency", "B"]
    assert list(canonical_keys(["p"], conditions, [0], samples=2)) == [
        ("p", "NT", 0, None, None),
        ("p", "consistency", 0, 0, None),
        ("p", "consistency", 0, 1, None),
        ("p", "B", 0, None, None),
    ]


def _manifest(**config) -> dict:
    """A hand-written manifest of five problems (only the fields a plan reads)."""
    base = {"conditions": ["primary"], "seeds": [0], "chunk_size": 2, "shard": None}
    return {"problems": ["p0", "p1", "p2", "p3", "p4"], "config": {**base, **config}}


def test_a_plan_read_from_a_manifest_lists_its_shard_units_in_order_of_work():
    plan = Plan.from_manifest(_manifest(shard=[2, 2], seeds=[0, 1], resolve=True))
    assert plan.chunks == (range(0, 2), range(2, 4), range(4, 5))
    assert plan.mine == (1,)  # chunk i belongs to shard i % 2 + 1
    assert plan.phases == ("NT", "B", "arms", "resolve")
    assert plan.record_phases == ("NT", "B", "arms")
    assert [u.name for u in plan.units()] == [
        "NT-s0-c00001",
        "NT-s1-c00001",
        "B-s0-c00001",
        "B-s1-c00001",
        "arms-s0-c00001",
        "arms-s1-c00001",
        "resolve-s0-c00001",
        "resolve-s1-c00001",
    ]
    assert plan.problems_of(1) == ["p2", "p3"]
    assert [c.code for c in plan.arms_of("B")] == ["empty", "conf", "doubt", "neutral"]
    assert plan.arm_bases == ("B",)


def test_each_unit_reads_the_parts_it_forks_from():
    plan = Plan.from_manifest(_manifest(conditions=["all"], resolve=True))
    assert plan.inputs_of(Unit("NT", 0, 1)) == []
    assert plan.inputs_of(Unit("oracle_B", 0, 1)) == []
    assert plan.inputs_of(Unit("arms", 0, 1)) == [Unit("B", 0, 1), Unit("oracle_B", 0, 1)]
    assert plan.inputs_of(Unit("resolve", 0, 1)) == [
        Unit("B", 0, 1),
        Unit("oracle_B", 0, 1),
        Unit("arms", 0, 1),
    ]

    # and the other way round: what must not be reused when a unit's records change
    assert plan.dependents_of(Unit("NT", 0, 1)) == []
    assert plan.dependents_of(Unit("B", 0, 1)) == [Unit("arms", 0, 1), Unit("resolve", 0, 1)]
    assert plan.dependents_of(Unit("arms", 0, 1)) == [Unit("resolve", 0, 1)]
    assert plan.dependents_of(Unit("resolve", 0, 1)) == []


def test_the_keys_a_unit_must_hold():
    plan = Plan.from_manifest(_manifest(consistency_samples=2))
    assert plan.base_codes == {"NT", "consistency", "B"}
    assert plan.expected_keys(Unit("B", 0, 0)) == {
        ("p0", "B", 0, None, None),
        ("p1", "B", 0, None, None),
    }
    assert plan.expected_keys(Unit("consistency", 0, 2)) == {
        ("p4", "consistency", 0, 0, None),
        ("p4", "consistency", 0, 1, None),
    }
    # arms only for the problems whose B record closed its thinking
    bases = {"B": {"p0": {"boundary": None}, "p1": {"boundary": 7}}}
    assert plan.expected_keys(Unit("arms", 0, 0), bases) == {
        ("p1", arm, 0, None, None) for arm in ("empty", "conf", "doubt", "neutral")
    }


def test_a_malformed_manifest_names_the_field():
    manifest = _manifest()
    del manifest["problems"]
    with pytest.raises(OutputDirError, match=r"run/manifest.json: field problems missing"):
        Plan.from_manifest(manifest, "run/manifest.json")
    with pytest.raises(OutputDirError, match=r"field config.conditions: unknown condition 'nope'"):
        Plan.from_manifest(_manifest(conditions=["nope"]))
    with pytest.raises(OutputDirError, match=r"config.chunk_size 0"):
        Plan.from_manifest(_manifest(chunk_size=0))
