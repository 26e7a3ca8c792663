"""Reading a committed answer out of the model's text, and scoring it.

Two steps, kept apart so each can be checked on its own:

1. **Extraction** (`extract_answer`): the text after the final think-close marker is free text.
   The answer span is taken the way a researcher reading the output would take it:
   - if some line starts with an answer label — `Answer:`, `Final answer:`, `The answer is`,
     `The final answer is`, in any case, possibly in markdown bold — the span is the text after
     the label on the *last* such line (a model that restates or corrects itself commits to its
     last statement); when that line holds only the label, the next non-empty line is the span;
   - otherwise the span is the first non-empty line;
   - then surrounding markup is removed, repeatedly: whitespace, a leading bullet or heading
     mark (`- `, `* `, `# `, `> `), `\\boxed{...}`, an `<answer>...</answer>`-style tag pair,
     matching pairs of `**`, `__`, `*`, `_`, backticks, `$`, straight or curly quotes, and a
     trailing `.` or `!`.

   Nothing else is rewritten: the official normalisation below does the rest.
2. **Scoring.** `exact_match` and `token_f1` are the official MuSiQue scorer
   (https://github.com/StonyBrookNLP/musique/blob/main/metrics/answer.py, itself SQuAD's): normalise by lowercasing,
   removing `string.punctuation`, removing the words a/an/the and collapsing whitespace — in that
   order — then compare strings (EM) or token multisets (F1). `max_over_golds` takes each metric's
   maximum over `[answer] + answer_aliases`. `parse_yes_no` reads StrategyQA's boolean.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Sequence

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)

# An answer label at the start of a line (after any leading markup), e.g. "**Final answer:**".
_LABEL = re.compile(
    r"^(?:the\s+)?(?:final\s+)?answer(?:\s+is\b\s*[*_]*\s*[:：]?|\s*[*_]*\s*[:：])[*_]*\s*",
    re.IGNORECASE,
)
_LEADING_MARK = re.compile(
    r"^(?:[-*•>#]+\s+|[*_]+(?=(?:the\s+)?(?:final\s+)?answer\b))", re.IGNORECASE
)
_BOXED = re.compile(r"^\$*\\boxed\{(.*)\}\$*$", re.DOTALL)
_TAG_PAIR = re.compile(r"^<(\w+)>(.*)</\1>$", re.DOTALL)
_PAIRS = (
    ("**", "**"),
    ("__", "__"),
    ("*", "*"),
    ("_", "_"),
    ("`", "`"),
    ("$", "$"),
    ('"', '"'),
    ("'", "'"),
    ("\u201c", "\u201d"),
    ("\u2018", "\u2019"),
    ("\u00ab", "\u00bb"),
)


def normalize_answer(text: str) -> str:
    """The official MuSiQue/SQuAD normalisation: lowercase, drop punctuation, drop a/an/the, squash spaces."""
    lowered = text.lower()
    no_punctuation = "".join(ch for ch in lowered if ch not in _PUNCTUATION)
    no_articles = _ARTICLES.sub(" ", no_punctuation)
    return " ".join(no_articles.split())


def answer_tokens(text: str) -> list[str]:
    """The normalised whitespace tokens of `text` (empty for an empty string)."""
    return normalize_answer(text).split() if text else []


def exact_match(prediction: str, gold: str) -> int:
    """1 if the normalised strings are equal, else 0 (official `compute_exact`)."""
    return int(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """Token F1 over normalised token multisets (official `compute_f1`).

    When either side has no token, F1 is 1.0 if both are empty and 0.0 otherwise.
    """
    predicted, expected = answer_tokens(prediction), answer_tokens(gold)
    if not predicted or not expected:
        return float(predicted == expected)
    shared = sum((Counter(predicted) & Counter(expected)).values())
    if shared == 0:
        return 0.0
    precision = shared / len(predicted)
    recall = shared / len(expected)
    return 2 * precision * recall / (precision + recall)


def max_over_golds(
    metric: Callable[[str, str], float], prediction: str, golds: Sequence[str]
) -> float:
    """The metric's maximum over the golds (official `metric_max_over_ground_truths`)."""
    if not golds:
        raise ValueError("max_over_golds needs at least one gold answer")
    return max(metric(prediction, gold) for gold in golds)


def _strip_markup(span: str) -> str:
    previous = None
    while span != previous:
        previous = span
        span = span.strip()
        span = _LEADING_MARK.sub("", span)
        boxed = _BOXED.match(span) or _TAG_PAIR.match(span)
        if boxed:
            span = boxed.group(boxed.lastindex)
        span = span.rstrip(".!").rstrip()
        for opener, closer in _PAIRS:
            if (
                len(span) >= len(opener) + len(closer)
                and span.startswith(opener)
                and span.endswith(closer)
            ):
                span = span[len(opener) : len(span) - len(closer)]
                break
    return span


def _strip_label(line: str) -> str | None:
    """The text after an answer label, or None when the line has no label."""
    unmarked = _LEADING_MARK.sub("", line.strip())
    match = _LABEL.match(unmarked)
    return None if match is None else unmarked[match.end() :]


def extract_answer(text: str | None) -> str | None:
    """The answer span of a committed answer (rules in the module docstring); None if there is none."""
    if text is None:
        return None
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return None
    span = lines[0]
    for index in range(len(lines) - 1, -1, -1):
        after_label = _strip_label(lines[index])
        if after_label is None:
            continue
        if after_label.strip(" *_") or index + 1 == len(lines):
            span = after_label
        else:
            span = lines[index + 1]
        break
    # A label may be repeated inside the span ("Answer: The answer is X").
    while (inner := _strip_label(span)) is not None and inner != span:
        span = inner
    span = _strip_markup(span)
    return span or None


def labelled_answer(text: str | None) -> str | None:
    """The answer span when some line of `text` carries an answer label (`Answer:` and the other
    labels above), else None: an unlabelled first line is not an answer in the task's format."""
    if text is None or not any(_strip_label(line) is not None for line in text.splitlines()):
        return None
    return extract_answer(text)


_YES_NO = re.compile(
    r"^[\W_]*?(yes|no|true|false)\b[*_`'\"\u201d\u2019)\]]*(.*)$", re.IGNORECASE | re.DOTALL
)
# What may follow the yes/no word: nothing, punctuation, or a short explanation.
_EXPLANATION = re.compile(r"^(?:[,.;:!\-\u2013\u2014(]|(?:because|since|as)\b)", re.IGNORECASE)


def parse_yes_no(text: str | None) -> bool | None:
    """StrategyQA's answer: True for yes/true, False for no/false, None when it cannot be read.

    The extracted span (see `extract_answer`) must start with yes/no/true/false, in any case,
    possibly in markup, followed by nothing, punctuation, or an explanation introduced by
    punctuation or because/since/as ("Yes, because ...", "No.", "**True** - since ...").
    Anything else ("Yes and no", "No idea", "Maybe", "Yes/No") is ungradeable.
    """
    span = extract_answer(text)
    if span is None:
        return None
    match = _YES_NO.match(span)
    if match is None:
        return None
    rest = match.group(2).strip()
    if rest and not _EXPLANATION.match(rest):
        return None
    return match.group(1).lower() in ("yes", "true")
