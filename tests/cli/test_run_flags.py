"""`nudge run`'s compact flag values (cli/run.py), parsed as the help text documents."""

from __future__ import annotations

import pytest

from nudgeability.cli.values import parse_max_new_tokens, parse_n, parse_seeds, parse_shard
from nudgeability.splice.run.config import ConfigError


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
