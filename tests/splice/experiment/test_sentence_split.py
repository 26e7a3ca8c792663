"""The last sentence before the cut, found on real tokenizers' ids: each case's text is encoded by
the tokenizer and the expected index was read off its pieces by hand (printed beside it)."""

from __future__ import annotations

import pytest

from nudgeability.models.testing.tiny_tokenizers import tiny_tokenizer
from nudgeability.splice.experiment.sentence_split import last_sentence_char, last_sentence_start

TEXTS = (
    "The Police were a band. Sting was not an officer. So the answer is no.",
    "First, recall the facts.\nThe river flows north.\n",
    'Is 3.5 bigger than 3? Yes! Then "it is." Done',
    "one sentence with no end",
    "Hmm...  Wait, really?\n\nI think so.  ",
    "Il a dit: très bien. Ça va.",
)
# SmolLM2: ' So' (13); 'The' after '\n' (7); ' Done' after '."' (17); none (0); 'I' after
# '\n','\n' (10); ' \xc3' holding the space and Ç's first byte (10)
SMOLLM2 = (13, 7, 17, 0, 10, 10)
# the tiny byte-level BPE (qwen3's, and GLM-Z1's, trained on the same corpus): 'S' after ' ' (38);
# 'The' (19); 'D' after ' ' (32); none (0); 'I' (22); Ç's first byte after ' ' (20)
TINY = (38, 19, 32, 0, 22, 20)


def _check(tokenizer, expected) -> None:
    def decode(ids):
        return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    for text, start in zip(TEXTS, expected):
        ids = tokenizer.encode(text, add_special_tokens=False)
        pieces = [decode([i]) for i in ids]
        assert last_sentence_start(ids, decode) == start, (text, list(enumerate(pieces)))


@pytest.mark.parametrize("family", ["qwen3", "glm_z1"])
def test_the_last_sentence_starts_at_the_hand_annotated_token_of_a_tiny_tokenizer(family):
    _check(tiny_tokenizer(family), TINY)


@pytest.mark.slow
def test_the_last_sentence_starts_at_the_hand_annotated_token_of_smollm2():
    from transformers import AutoTokenizer

    from nudgeability.models.smollm2 import converted_dir

    _check(AutoTokenizer.from_pretrained(converted_dir()), SMOLLM2)


def test_empty_reasoning_has_its_sentence_at_zero():
    assert last_sentence_start([], lambda ids: "") == 0


@pytest.mark.parametrize(
    "text, last",
    [
        ("A b. C d.", "C d."),
        ("e.g. this splits. Yes", "Yes"),  # no abbreviation list
        ("Pi is 3.14 exactly", "Pi is 3.14 exactly"),
        ("Really?! Sure.\n\n", "Sure.\n\n"),
        ("Done.)  Next one", "Next one"),
        ("   ", "   "),
    ],
)
def test_the_last_sentence_of_a_text(text, last):
    assert text[last_sentence_char(text) :] == last
