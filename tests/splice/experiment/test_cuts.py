"""`--cuts` (splice/experiment/cuts.py): its spellings, and the cuts it makes on a real
tokenizer's ids, each expected index read off the printed pieces by hand."""

from __future__ import annotations

import pytest

from nudgeability.models.testing.tiny_tokenizers import tiny_tokenizer
from nudgeability.splice.experiment.cuts import (
    CutsError,
    CutSpec,
    cut_positions,
    parse_cuts,
    sentence_cuts,
)

# The tiny byte-level BPE's pieces: 'S' of "Sting" at 18 and of "So" at 38; 'The' after '\n' at
# 19; 'W' after the two spaces at 8 and 'I' after '\n','\n' at 22.
CASES = (
    ("The Police were a band. Sting was not an officer. So the answer is no.", [18, 38]),
    ("First, recall the facts.\nThe river flows north.\n", [19]),
    ("Hmm...  Wait, really?\n\nI think so.  ", [8, 22]),
    ("one sentence with no end", []),
)


def _decoder(tokenizer):
    def decode(ids):
        return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    return decode


@pytest.mark.parametrize("text, expected", CASES)
def test_every_sentence_after_the_first_starts_a_cut_at_its_hand_annotated_token(text, expected):
    tokenizer = tiny_tokenizer("qwen3")
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert sentence_cuts(ids, _decoder(tokenizer)) == expected
    assert cut_positions(parse_cuts("all"), ids, _decoder(tokenizer)) == expected


def test_sentence_counts_pick_the_cut_after_those_sentences():
    tokenizer = tiny_tokenizer("qwen3")
    ids = tokenizer.encode(CASES[0][0], add_special_tokens=False)
    decode = _decoder(tokenizer)
    assert cut_positions(parse_cuts("sentences:1"), ids, decode) == [18]
    assert cut_positions(parse_cuts("sentences:2,1,9"), ids, decode) == [18, 38]  # 9: none


def test_fractions_round_to_the_nearest_token_inside_the_reasoning():
    ids = list(range(10))
    spec = parse_cuts("0.04,0.25,0.5,0.51,0.99")
    # a brute-force rounding of each fraction of 10 tokens, kept within 1..9 and made distinct
    expected = sorted({min(9, max(1, round(f * 10))) for f in (0.04, 0.25, 0.5, 0.51, 0.99)})
    assert cut_positions(spec, ids, lambda ids: "") == expected == [1, 2, 5, 9]
    assert cut_positions(spec, [7], lambda ids: "") == []  # one token: nothing strictly inside
    assert cut_positions(None, ids, lambda ids: "") == []


@pytest.mark.parametrize(
    "text, canonical",
    [
        ("all", "all"),
        (" 0.5,0.25,0.5 ", "0.25,0.5"),
        ("sentences:7,3", "sentences:3,7"),
    ],
)
def test_a_spec_has_one_canonical_spelling(text, canonical):
    assert str(parse_cuts(text)) == canonical
    assert parse_cuts(canonical) == parse_cuts(text)
    assert isinstance(parse_cuts(text), CutSpec)


@pytest.mark.parametrize(
    "text, said",
    [
        ("1.0", "not strictly between 0 and 1"),
        ("0", "not strictly between 0 and 1"),
        ("half", "'half' is not a fraction"),
        ("sentences:0", "not a whole number"),
        ("sentences:x", "not a whole number"),
        ("nan", "not strictly between 0 and 1"),
    ],
)
def test_a_malformed_spec_is_one_line_naming_the_flag(text, said):
    with pytest.raises(CutsError) as caught:
        parse_cuts(text)
    message = str(caught.value)
    assert message.startswith("--cuts ") and said in message and "\n" not in message
