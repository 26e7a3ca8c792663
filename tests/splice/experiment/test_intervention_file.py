"""A user's interventions file: loaded and checked, and every malformed one refused in one line
naming the file, the line and the field (splice/experiment/intervention_file.py)."""

from __future__ import annotations

import hashlib

import pytest
from helpers.tiny_runs import run_nudge

from nudgeability.splice.experiment.conditions import (
    PAIR_HEADERS,
    PAIRS,
    UnknownConditionError,
    get_condition,
    parse_conditions,
    register_user_conditions,
)
from nudgeability.splice.experiment.intervention_file import (
    InterventionFileError,
    load_intervention_file,
)

HEAD = "from nudgeability.splice.experiment.interventions import Intervention\n\n"
GOOD = HEAD + (
    "INTERVENTIONS = [\n"
    '    Intervention("cut_last", "last sentence deleted", edit="delete", pair="cut", side="-"),\n'
    '    Intervention("keep_last", "nothing done", text="", pair="cut", side="+"),\n'
    '    Intervention("hm", "Hm. on the oracle base", base="oracle_B", text="Hm.", seal=True),\n'
    "]\n"
)


def _write(tmp_path, text: str):
    path = tmp_path / "mine.py"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_good_file_loads_its_interventions_and_hash(tmp_path):
    path = _write(tmp_path, GOOD)
    loaded = load_intervention_file(path)
    assert loaded.path == str(path.resolve())
    assert loaded.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [i.code for i in loaded.interventions] == ["cut_last", "keep_last", "hm"]
    hm = loaded.conditions()[2]
    assert (hm.parent, hm.oracle, hm.sealed, hm.text, hm.user) == (
        "oracle_B",
        True,
        True,
        "Hm.",
        True,
    )


def test_registered_conditions_are_known_by_code_and_pair(tmp_path):
    register_user_conditions(load_intervention_file(_write(tmp_path, GOOD)).conditions())
    assert get_condition("cut_last").edit == "delete"
    assert PAIRS["cut"] == ("keep_last", "cut_last", "B") and PAIR_HEADERS["cut"] == "S cut"
    codes = [c.code for c in parse_conditions(["primary", "hm", "cut_last", "keep_last"])]
    # each base, its shipped arms, then the user's arms on it
    assert codes == [
        "NT", "B", "empty", "conf", "doubt", "neutral", "cut_last", "keep_last", "oracle_B", "hm"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "body, line, field",
    [
        ("INTERVENTIONS = [\n    Intervention('a', 'b', text='x'\n", 2, "syntax"),
        ("INTERVENTIONS = [\n    Intervention('a', 'b', base='C', text='x'),\n]\n", 2, "base"),
        ("INTERVENTIONS = [\n    Intervention('a', 'no text given'),\n]\n", 2, "text"),
        (
            "INTERVENTIONS = [\n    Intervention('a', 'b', text='x'),\n"
            "    Intervention('w', 'b', text='y', pair='p', side='+'),\n]\n",
            3,
            "pair",
        ),
        ("INTERVENTIONS = [\n    Intervention('conf', 'b', text='x'),\n]\n", 2, "code"),
        ("INTERVENTIONS = [\n    Intervention('a', 'b', txt='x'),\n]\n", 2, "TypeError"),
        ("INTERVENTIONS = [\n    Intervention('a', 'b', edit='swap', text='x'),\n]\n", 2, "edit"),
        ("INTERVENTIONS = [\n    Intervention('a', 'b', sentence='neutral'),\n]\n", 2, "sentence"),
        ("x = 1\n", 1, "INTERVENTIONS"),
    ],
)
def test_a_malformed_file_is_refused_naming_the_file_line_and_field(tmp_path, body, line, field):
    path = _write(tmp_path, HEAD + body)
    with pytest.raises(InterventionFileError) as caught:
        load_intervention_file(path)
    shift = 0 if field == "INTERVENTIONS" else HEAD.count("\n")
    message = str(caught.value)
    assert message.startswith(f"{path}:{line + shift}: {field}: "), message
    assert "\n" not in message


def test_nudge_run_prints_the_one_line_and_writes_nothing(tmp_path):
    path = _write(
        tmp_path, HEAD + "INTERVENTIONS = [Intervention('a', 'b', base='NT', text='x')]\n"
    )
    out = tmp_path / "out"
    status, err = run_nudge(["run", "--interventions", path, "--out", out, "--no-report"])
    assert status != 0
    assert f"{path}:3: base: unknown base 'NT'" in err
    assert not out.exists()


def test_a_code_or_pair_a_shipped_condition_uses_cannot_be_registered(tmp_path):
    conditions = load_intervention_file(_write(tmp_path, GOOD)).conditions()
    register_user_conditions(conditions)
    register_user_conditions(conditions)  # the same again: nothing changes
    clash = conditions[2].__class__(**{**conditions[2].__dict__, "description": "other"})
    with pytest.raises(UnknownConditionError, match="already defined otherwise"):
        register_user_conditions([clash])
    shipped = conditions[2].__class__(**{**conditions[2].__dict__, "code": "doubt"})
    with pytest.raises(UnknownConditionError, match="shipped"):
        register_user_conditions([shipped])
