"""Where the last sentence of a base's reasoning begins, on the base's own token ids.

An intervention that deletes or replaces the sentence before the cut
(splice/experiment/interventions.py `edit`) keeps the ids `reasoning[:start]`, so the edit falls
on a token boundary of what the model wrote and nothing is tokenised again.

The rule, on the decoded text: a sentence ends after a run of `.`, `!` or `?` (with any closing
quotes or brackets) followed by whitespace, or at a line break. The last sentence is the text
after the last such end that still has non-blank text after it; a reasoning with no end is one
sentence. There is no abbreviation list ("e.g. x" ends a sentence), and a decimal point ("3.5")
ends none. `start` is the index of the token that holds the last sentence's first non-blank
character, as the cut is the index of the token in which the think-close begins (splice/README.md
*The cut*): a leading space the vocabulary fuses into that token goes with the sentence, and a
token holding the end of one sentence and the start of the next stays with the earlier one only
if the sentence's first character lies after it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

# A sentence's end: terminal punctuation, closing quotes or brackets, then blanks; or a line break
# and the blanks after it.
_END = re.compile(r"[.!?]+[\"'”’)\]]*\s+|\n\s*")


def sentence_chars(text: str) -> list[int]:
    """The index in `text` of each sentence's first non-blank character, in order ([0] for blank
    text or one sentence that starts with it)."""
    content_end = len(text.rstrip())
    starts = [len(text) - len(text.lstrip()) if content_end else 0]
    for match in _END.finditer(text):
        start = match.end()
        if start < content_end:
            start += len(text[start:]) - len(text[start:].lstrip())
            if start < content_end and start > starts[-1]:
                starts.append(start)
    return starts


def last_sentence_char(text: str) -> int:
    """The index in `text` of the last sentence's first non-blank character (0 for blank text)."""
    return sentence_chars(text)[-1]


def last_sentence_start(ids: Sequence[int], decode: Callable[[list[int]], str]) -> int:
    """The index of the token in `ids` that holds the last sentence's first character.

    `decode` maps ids to text (the family's `decode`: special tokens kept, no clean-up). The
    offsets are those of decoding each prefix `ids[:i]`, as the record's `cut` is measured
    (splice/run/units/base.py `_record`). Empty `ids` give 0; so does a reasoning that is one sentence.
    """
    ids = list(ids)
    if not ids:
        return 0
    return token_holding(ids, decode, last_sentence_char(decode(ids)))


def token_holding(ids: list[int], decode: Callable[[list[int]], str], target: int) -> int:
    """The index of the token of `ids` that holds character `target` of their text: the last i
    in [0, len(ids)) whose prefix `ids[:i]` decodes to at most `target` characters.

    Found by bisection, in O(log n) decodes, since the prefixes' lengths only pass `target`
    once: every prefix past that token decodes the text up to `target` and at least one more
    character (the character itself, or a replacement character for its first bytes), so no
    longer prefix falls back to `target` or below.
    """
    low, high = 0, len(ids) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if len(decode(ids[:middle])) <= target:
            low = middle
        else:
            high = middle - 1
    return low
