"""The condition list, parsing --conditions, and the sentences file."""

from __future__ import annotations

import pytest
from helpers.protocol_table import PROTOCOL, SENTENCE_IDS

from nudgeability.splice.experiment.conditions import (
    CONDITION_CODES,
    CONDITIONS,
    UnknownConditionError,
    get_condition,
    parse_conditions,
)
from nudgeability.splice.experiment.sentences import (
    DEFAULT_SENTENCES_PATH,
    SentencesFileError,
    load_sentences,
)

# the `primary` preset, in canonical order (README.md, `--conditions`)
PRIMARY = ["NT", "B", "empty", "conf", "doubt", "neutral"]


def test_conditions_match_the_protocol_table():
    assert CONDITION_CODES == tuple(PROTOCOL)
    for condition in CONDITIONS:
        assert (
            condition.kind,
            condition.side,
            condition.voice,
            condition.seal,
            condition.oracle,
            condition.base,
        ) == PROTOCOL[condition.code]
        assert condition.description


def test_primary_preset_is_nt_b_empty_conf_doubt_neutral():
    assert [c.code for c in parse_conditions("primary")] == PRIMARY
    assert [c.code for c in parse_conditions("all")] == list(CONDITION_CODES)


def test_parsing_returns_canonical_order_once_each_whatever_the_input_order():
    parsed = parse_conditions(" doubt ,NT, conf,B,conf ")
    assert [c.code for c in parsed] == ["NT", "B", "conf", "doubt"]
    assert parse_conditions(["conf", "doubt"]) == parsed
    assert [c.code for c in parse_conditions("primary,sealed_conf")] == PRIMARY + ["sealed_conf"]


def test_arms_bring_their_base_and_nt_implicitly():
    assert [c.code for c in parse_conditions("doubt_expert")] == ["NT", "B", "doubt_expert"]
    assert [c.code for c in parse_conditions("oracle_conf")] == ["NT", "oracle_B", "oracle_conf"]
    assert [c.code for c in parse_conditions("B")] == ["NT", "B"]
    assert [c.code for c in parse_conditions("NT")] == ["NT"]


def test_names_match_case_insensitively():
    assert [c.code for c in parse_conditions("nt,b,ORACLE_b,Primary")] == PRIMARY + ["oracle_B"]
    assert get_condition("oracle_b").code == "oracle_B"


def test_unknown_condition_names_it_and_lists_the_known_ones():
    with pytest.raises(UnknownConditionError) as error:
        parse_conditions("NT,B,confident")
    message = str(error.value)
    assert message.startswith("unknown condition 'confident'; known conditions: NT, B, empty,")
    assert "oracle_doubt" in message and "presets: primary" in message and "\n" not in message
    assert isinstance(error.value, ValueError)


def test_empty_conditions_list_is_refused():
    with pytest.raises(UnknownConditionError, match="the conditions list is empty"):
        parse_conditions(" , ")


def test_shipped_sentences_give_one_sentence_per_polarity_and_voice_plus_neutral():
    sentences = load_sentences()
    assert sentences.source == str(DEFAULT_SENTENCES_PATH)
    ids = {
        f"{voice}.{polarity}"
        for voice in ("first", "second", "reviewer", "expert")
        for polarity in ("confidence", "doubt")
    } | {"neutral"}
    assert set(sentences.texts) == ids
    assert len(set(sentences.texts.values())) == len(ids)  # all distinct
    assert all(text == text.strip() and text for text in sentences.texts.values())


def test_sentence_for_maps_each_condition_to_its_sentence():
    sentences = load_sentences()
    for condition in CONDITIONS:
        found = sentences.sentence_for(condition)
        if SENTENCE_IDS[condition.code] is None:
            assert found is None
        else:
            assert found == (
                SENTENCE_IDS[condition.code],
                sentences.text(SENTENCE_IDS[condition.code]),
            )


_GOOD = """neutral = "N."
[first]
confidence = "C1."
doubt = "D1."
[second]
confidence = "C2."
doubt = "D2."
[reviewer]
confidence = "C3."
doubt = "D3."
[expert]
confidence = "C4."
doubt = "D4."
"""


def test_a_user_sentences_file_replaces_the_wording(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(_GOOD.replace('"C3."', '"  Reviewer is sure.  "'))
    sentences = load_sentences(path)
    assert sentences.sentence_for(get_condition("conf_reviewer")) == (
        "reviewer.confidence",
        "Reviewer is sure.",
    )
    assert sentences.source == str(path) and len(sentences.sha256) == 64


def test_sentences_file_missing_a_polarity_names_the_file_and_key(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(_GOOD.replace('doubt = "D3."\n', ""))
    with pytest.raises(SentencesFileError) as error:
        load_sentences(path)
    assert str(error.value) == (
        f"{path}: [reviewer] has no 'doubt' sentence "
        "('reviewer.doubt'); add doubt = \"...\" under [reviewer]"
    )
    assert isinstance(error.value, ValueError)


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (
            lambda t: t.replace('[expert]\nconfidence = "C4."\ndoubt = "D4."\n', ""),
            "no [expert] table",
        ),
        (lambda t: t.replace('neutral = "N."\n', ""), "no 'neutral' sentence"),
        (lambda t: t.replace('"D2."', '"  "'), "'second.doubt' must be a non-empty string"),
        (lambda t: t.replace('"D2."', "3"), "'second.doubt' must be a non-empty string"),
        (
            lambda t: t.replace('confidence = "C1."', 'confidense = "C1."'),
            "[first] has no 'confidence' sentence",
        ),
        (lambda t: t + 'hedge = "H."\n', "unknown key 'expert.hedge'"),
        (lambda t: 'moderate = "M."\n' + t, "unknown key 'moderate'"),
        (lambda t: t.replace('doubt = "D1."', 'doubt = "D1.'), "not a valid TOML file"),
    ],
)
def test_malformed_sentences_files_name_the_file_and_key(tmp_path, edit, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(edit(_GOOD))
    with pytest.raises(SentencesFileError) as error:
        load_sentences(path)
    assert str(error.value).startswith(f"{path}: ") and fragment in str(error.value)
    assert "\n" not in str(error.value)
