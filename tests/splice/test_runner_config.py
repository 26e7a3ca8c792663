"""The run's compact flag values, config differences, and the plan's chunks and shards."""

from __future__ import annotations

import pytest

from nudgeability.splice.experiment.conditions import CONSISTENCY_CONDITION, parse_conditions
from nudgeability.splice.plan import (
    Unit,
    canonical_keys,
    chunk_bounds,
    phases_of,
    shard_chunks,
    units_of,
)
from nudgeability.splice.run_cli import parse_max_new_tokens, parse_n, parse_seeds, parse_shard
from nudgeability.splice.run_config import ConfigError, diff_configs, resolve_decoding


def test_flag_values_parse_as_documented():
    assert parse_seeds("0,1,2") == (0, 1, 2)
    assert parse_shard("2/4") == (2, 4)
    assert parse_max_new_tokens("512") == (512, 512)
    assert parse_max_new_tokens("512,128") == (512, 128)
    assert parse_n("25") == 25 and parse_n("all") is None


@pytest.mark.parametrize(
    "parse,text",
    [
        (parse_seeds, "0,0"),
        (parse_seeds, "a"),
        (parse_seeds, "-1"),
        (parse_shard, "0/2"),
        (parse_shard, "2"),
        (parse_shard, "3/2"),
        (parse_max_new_tokens, "1,2,3"),
        (parse_max_new_tokens, "0,4"),
        (parse_n, "four"),
    ],
)
def test_bad_flag_values_raise_config_errors(parse, text):
    with pytest.raises(ConfigError):
        parse(text)


def test_decoding_modes_resolve_to_the_protocol_settings():
    assert resolve_decoding("greedy", None) == (0.0, 1.0, (0,))
    assert resolve_decoding("sampled", None) == (1.0, 0.95, (0, 1, 2))
    assert resolve_decoding("sampled", (5,)) == (1.0, 0.95, (5,))
    with pytest.raises(ConfigError, match="--seeds"):
        resolve_decoding("greedy", (0, 1))


def test_config_differences_name_each_nested_key():
    stored = {"config": {"n": 4, "seeds": [0], "shard": None}, "family": "qwen3"}
    current = {"config": {"n": 5, "seeds": [0], "extra": 1}, "family": "qwen3"}
    assert diff_configs(stored, current) == [
        "config.extra: stored nothing, now 1",
        "config.n: stored 4, now 5",
        "config.shard: stored null, now nothing",
    ]
    assert diff_configs(stored, stored) == []


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
        ("p", "NT", 0, None),
        ("p", "NT", 1, None),
        ("p", "B", 0, None),
        ("p", "B", 1, None),
        ("q", "NT", 0, None),
        ("q", "NT", 1, None),
        ("q", "B", 0, None),
        ("q", "B", 1, None),
    ]


def test_consistency_samples_follow_nt_and_are_listed_per_sample():
    conditions = parse_conditions("B")
    conditions = [conditions[0], CONSISTENCY_CONDITION, *conditions[1:]]
    assert phases_of(conditions) == ["NT", "consistency", "B"]
    assert list(canonical_keys(["p"], conditions, [0], samples=2)) == [
        ("p", "NT", 0, None),
        ("p", "consistency", 0, 0),
        ("p", "consistency", 0, 1),
        ("p", "B", 0, None),
    ]
