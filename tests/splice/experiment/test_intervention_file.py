"""A user's interventions file: loaded and checked (Python, TOML or JSON), every malformed one
refused in one line naming the file, the line (or entry) and the field, and made into the run's
own `ConditionSet` (splice/experiment/intervention_file.py)."""

from __future__ import annotations

import hashlib
import json

import pytest
from helpers.tiny_runs import run_nudge

from nudgeability.splice.experiment.conditions import (
    SHIPPED_CONDITIONS,
    ConditionSet,
    UnknownConditionError,
)
from nudgeability.splice.experiment.intervention_file import (
    InterventionFileError,
    from_definitions,
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
# the same three arms as data, written by hand
GOOD_TOML = """
[[interventions]]
code = "cut_last"
description = "last sentence deleted"
edit = "delete"
pair = "cut"
side = "-"

[[interventions]]
code = "keep_last"
description = "nothing done"
text = ""
pair = "cut"
side = "+"

[[interventions]]
code = "hm"
description = "Hm. on the oracle base"
base = "oracle_B"
text = "Hm."
seal = true
"""
GOOD_JSON = [
    {
        "code": "cut_last",
        "description": "last sentence deleted",
        "edit": "delete",
        "pair": "cut",
        "side": "-",
    },
    {"code": "keep_last", "description": "nothing done", "text": "", "pair": "cut", "side": "+"},
    {
        "code": "hm",
        "description": "Hm. on the oracle base",
        "base": "oracle_B",
        "text": "Hm.",
        "seal": True,
    },
]


def _write(tmp_path, text: str, name: str = "mine.py"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_good_file_loads_its_interventions_and_hash(tmp_path):
    path = _write(tmp_path, GOOD)
    loaded = load_intervention_file(path)
    assert loaded.path == str(path.resolve())
    assert loaded.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [i.code for i in loaded.interventions] == ["cut_last", "keep_last", "hm"]
    hm = loaded.interventions[2]
    assert (hm.base, hm.oracle, hm.seal, hm.text, hm.user) == ("oracle_B", True, True, "Hm.", True)


@pytest.mark.parametrize("name", ["mine.toml", "mine.json"])
def test_a_data_file_defines_the_same_arms_as_the_python_one(tmp_path, name):
    text = GOOD_TOML if name.endswith(".toml") else json.dumps({"interventions": GOOD_JSON})
    data = load_intervention_file(_write(tmp_path, text, name))
    python = load_intervention_file(_write(tmp_path, GOOD))
    assert data.conditions == python.conditions
    assert data.definitions() == python.definitions()


def test_the_set_knows_the_runs_codes_and_pairs(tmp_path):
    known = load_intervention_file(_write(tmp_path, GOOD)).conditions
    assert known.get("cut_last").edit == "delete"
    assert known.pairs["cut"] == ("keep_last", "cut_last", "B")
    assert known.pair_headers["cut"] == "S cut"
    assert known.report_order[-3:] == ("cut_last", "keep_last", "hm")
    codes = [c.code for c in known.parse(["primary", "hm", "cut_last", "keep_last"])]
    # each base, its shipped arms, then the user's arms on it
    assert codes == [
        "NT", "B", "empty", "conf", "doubt", "neutral", "cut_last", "keep_last", "oracle_B", "hm"
    ]  # fmt: skip
    # the shipped set is untouched: nothing is registered anywhere
    assert "cut" not in SHIPPED_CONDITIONS.pairs
    with pytest.raises(UnknownConditionError, match="unknown condition 'cut_last'"):
        SHIPPED_CONDITIONS.get("cut_last")


def test_two_runs_may_give_one_code_two_meanings_in_one_process(tmp_path):
    """What two manifests define are two values: neither changes what the other knows."""
    mine = load_intervention_file(_write(tmp_path, GOOD)).definitions()
    theirs = [dict(d, text="Hmm." if d["code"] == "hm" else d["text"]) for d in mine]
    a, b = from_definitions(mine, "a/manifest.json"), from_definitions(theirs, "b/manifest.json")
    assert (a.get("hm").text, b.get("hm").text) == ("Hm.", "Hmm.")
    assert from_definitions(mine, "a/manifest.json") == a  # read again: the same value


def _listing(*entries: str) -> str:
    """A file whose INTERVENTIONS lists `entries`, one a line from the list's second line."""
    return "INTERVENTIONS = [\n" + "".join(f"    {entry},\n" for entry in entries) + "]\n"


@pytest.mark.parametrize(
    "body, line, field",
    [
        ("INTERVENTIONS = [\n    Intervention('a', 'b', text='x'\n", 2, "syntax"),
        (_listing("Intervention('a', 'b', base='C', text='x')"), 2, "base"),
        (_listing("Intervention('a', 'no text given')"), 2, "text"),
        (
            _listing(
                "Intervention('a', 'b', text='x')",
                "Intervention('w', 'b', text='y', pair='p', side='+')",
            ),
            3,
            "pair",
        ),
        (_listing("Intervention('conf', 'b', text='x')"), 2, "code"),
        (_listing("Intervention('a', 'b', txt='x')"), 2, "TypeError"),
        (_listing("Intervention('a', 'b', edit='swap', text='x')"), 2, "edit"),
        (_listing("Intervention('a', 'b', sentence='neutral')"), 2, "sentence"),
        (
            _listing("Intervention('a', 'b', text='x')", "Intervention('A', 'b', text='y')"),
            3,
            "code",
        ),
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


@pytest.mark.parametrize(
    "entries, field",
    [
        ([{"code": "a", "description": "b", "txt": "x"}], "interventions[0].txt"),
        ([{"code": "a", "text": "x"}], "interventions[0].description"),
        ([{"code": "a", "description": "b", "base": "NT", "text": "x"}], "interventions[0].base"),
        (
            [
                {"code": "a", "description": "b", "text": "x"},
                {"code": "doubt", "description": "b", "text": "y"},
            ],
            "interventions[1].code",
        ),
    ],
)
def test_a_malformed_data_file_names_the_entry_and_field(tmp_path, entries, field):
    path = _write(tmp_path, json.dumps(entries), "mine.json")
    with pytest.raises(InterventionFileError) as caught:
        load_intervention_file(path)
    assert str(caught.value).startswith(f"{path}:0: {field}: "), caught.value


def test_nudge_run_prints_the_one_line_and_writes_nothing(tmp_path):
    path = _write(
        tmp_path, HEAD + "INTERVENTIONS = [Intervention('a', 'b', base='NT', text='x')]\n"
    )
    out = tmp_path / "out"
    status, err = run_nudge(["run", "--interventions", path, "--out", out, "--no-report"])
    assert status != 0
    assert f"{path}:3: base: unknown base 'NT'" in err
    assert not out.exists()


def test_a_code_or_pair_a_shipped_condition_uses_cannot_join_the_set(tmp_path):
    arms = load_intervention_file(_write(tmp_path, GOOD)).interventions
    assert ConditionSet(arms) == ConditionSet(arms)
    shipped = arms[2].__class__(**{**arms[2].__dict__, "code": "doubt"})
    with pytest.raises(UnknownConditionError, match="shipped"):
        ConditionSet((shipped,))
    renamed = [a.__class__(**{**a.__dict__, "pair": "sealed"}) for a in arms[:2]]
    with pytest.raises(UnknownConditionError, match="shipped pair"):
        ConditionSet(tuple(renamed))
