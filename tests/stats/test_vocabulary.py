"""The shared vocabulary: conditions and action kinds are defined once, and stats follows them.

A condition added to splice/experiment/conditions.py (or an action kind added to models/families/action.py)
must show up in the report order, the figures, the report tables and the records join without a
second edit; these tests fail when one of them is left behind.
"""

from __future__ import annotations

import itertools

import pytest

from nudgeability.models.families.action import ACTION_KINDS, Action
from nudgeability.splice.experiment.conditions import (
    CONDITION_CODES,
    CONDITIONS,
    PAIR_HEADERS,
    SHIPPED_CONDITIONS,
    short_names,
)
from nudgeability.splice.rundir.records import Record
from nudgeability.stats import REPORT_ORDER as REPORT_CONDITIONS
from nudgeability.stats import SHIPPED_PAIRS as PAIRS
from nudgeability.stats import ExperimentTable, table_from_records
from nudgeability.stats.actions import NONE, action_code, action_kind
from nudgeability.stats.report.tables.experiments import PAIR_COLUMNS
from nudgeability.stats.table import ExperimentLabel

BY_CODE = {condition.code: condition for condition in CONDITIONS}


def test_every_arm_forks_from_a_base_that_exists_and_bases_have_no_parent():
    for condition in CONDITIONS:
        if condition.kind == "arm":
            assert BY_CODE[condition.base].kind == "base", condition.code
        else:
            assert condition.kind == "base" and condition.base is None, condition.code


def test_the_pairs_stats_uses_are_exactly_the_conditions_plus_minus_pairs():
    # Brute force from the conditions' attributes: a + arm and a - arm that agree in everything
    # else (base, voice, sealed, oracle) form a pair.
    signed = [c for c in CONDITIONS if c.side in ("+", "-")]
    expected = {
        (plus.code, minus.code, plus.base)
        for plus, minus in itertools.product(signed, signed)
        if (plus.side, minus.side) == ("+", "-")
        and (plus.base, plus.voice, plus.seal, plus.oracle)
        == (minus.base, minus.voice, minus.seal, minus.oracle)
    }
    assert {tuple(pair) for pair in PAIRS.values()} == expected
    assert len(PAIRS) == len(expected)
    # every pair but the primary one has a column in the controls table, with its header
    assert {name for name, _ in PAIR_COLUMNS} == set(PAIRS) - {"first"}
    assert all(header == PAIR_HEADERS[name] for name, header in PAIR_COLUMNS)


def test_every_condition_is_in_the_report_order_once_and_has_a_figure_label():
    assert sorted(REPORT_CONDITIONS) == sorted(CONDITION_CODES)
    labels = short_names([SHIPPED_CONDITIONS])
    for code in CONDITION_CODES:
        assert labels[code], code
    # the hand-checked order the reports have always used (bases, controls, then signed arms)
    assert REPORT_CONDITIONS[:6] == ("NT", "B", "empty", "neutral", "conf", "doubt")
    assert REPORT_CONDITIONS[-3:] == ("oracle_B", "oracle_conf", "oracle_doubt")


def _records(record_line, open_bases: set[str]) -> list[Record]:
    lines = []
    for condition in CONDITIONS:
        boundary = 5 if condition.code in open_bases else None
        graded = condition.kind == "base"
        line = record_line("p0", condition.code, "TOOL", graded=graded, boundary=boundary)
        lines.append(Record.from_json(line))
    return lines


def test_the_records_join_holds_every_condition_and_forks_each_arm_from_its_own_base(runs):
    bases = {c.code for c in CONDITIONS if c.kind == "base"} - {"NT"}
    table = table_from_records(_records(runs.record_line, bases), ExperimentLabel())
    for code in CONDITION_CODES:
        if code != "NT":
            assert table.actions(code) is not None and table.actions(code)[0] == 1, code
    assert set(table.correct) == bases
    # A base that never closed its thinking takes exactly its own arms with it; the oracle arms
    # fork from oracle_B and every other arm from B (the protocol's table, written by hand).
    oracle_arms = {"oracle_conf", "oracle_doubt"}
    for closed_base, lost in (("oracle_B", oracle_arms), ("B", set(CONDITION_CODES) - oracle_arms)):
        table = table_from_records(
            _records(runs.record_line, bases - {closed_base}), ExperimentLabel()
        )
        for code in set(CONDITION_CODES) - {"NT", "B", "oracle_B"}:
            assert (table.actions(code)[0] == NONE) == (code in lost), (closed_base, code)


def test_every_action_kind_the_parser_can_produce_has_a_code_in_the_stats():
    # Action refuses any other kind, so the parser can produce exactly ACTION_KINDS.
    with pytest.raises(ValueError):
        Action("ABSTAIN")
    codes = [action_code(kind) for kind in ACTION_KINDS]
    assert len(set(codes)) == len(ACTION_KINDS) and NONE not in codes
    assert [action_kind(code) for code in codes] == list(ACTION_KINDS)
    ExperimentTable(s=[1] * len(codes), base=codes)  # every code is a valid table entry
    assert (
        action_code("SELF"),
        action_code("TOOL"),
        action_code("OTHER"),
        action_code("TRUNC"),
    ) == (
        0,
        1,
        2,
        3,
    )
