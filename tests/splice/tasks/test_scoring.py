"""The official MuSiQue scorer and answer extraction, on hand-worked examples.

Every expected value below was worked out by hand from the official definition
(https://github.com/StonyBrookNLP/musique/blob/main/metrics/answer.py): lowercase -> remove string.punctuation -> replace the
words a/an/the by a space -> collapse whitespace; EM compares the normalised strings; F1 compares
the token multisets; both take their maximum over [answer] + answer_aliases.
"""

from __future__ import annotations

import pytest

from nudgeability.splice.tasks import MusiqueTask, Problem
from nudgeability.splice.tasks.scoring import (
    exact_match,
    extract_answer,
    max_over_golds,
    normalize_answer,
    token_f1,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        # "the eiffel tower!" -> punctuation gone -> "the" removed -> "eiffel tower"
        ("The Eiffel Tower!", "eiffel tower"),
        # every article goes, commas too: "an apple, a pear and the fig" -> "apple pear and fig"
        ("An apple, a pear and the fig", "apple pear and fig"),
        # articles only as whole words: "theatre" and "another" stay
        ("The theatre of another", "theatre of another"),
        # punctuation is removed BEFORE articles: "the-end" -> "theend", which is not an article
        ("The-End", "theend"),
        # "u.s.a." -> "usa"
        ("U.S.A.", "usa"),
        # whitespace of any kind collapses to single spaces
        ("  New \t York\n City ", "new york city"),
        # non-ASCII letters are kept; the curly apostrophe is not in string.punctuation
        ("Año O\u2019Neil", "año o\u2019neil"),
        # only punctuation and articles -> empty
        ("The... a!", ""),
    ],
)
def test_normalize_answer_follows_the_official_steps_in_order(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match_ignores_case_articles_and_punctuation():
    assert exact_match("the Beatles.", "Beatles") == 1
    # "beatles, the" -> "beatles the" -> "beatles" after dropping the article
    assert exact_match("Beatles, The", "The Beatles") == 1
    assert exact_match("Beatle", "The Beatles") == 0
    assert exact_match("1,000", "1000") == 1  # the comma is punctuation


def test_token_f1_partial_overlap_is_the_harmonic_mean_of_token_precision_and_recall():
    # pred [new, york, city], gold [new, york]: 2 shared; P = 2/3, R = 1;
    # F1 = 2 * (2/3) * 1 / (2/3 + 1) = (4/3) / (5/3) = 4/5
    assert token_f1("New York City", "New York") == pytest.approx(0.8)
    # symmetric in its arguments: P and R swap
    assert token_f1("New York", "New York City") == pytest.approx(0.8)


def test_token_f1_counts_repeated_tokens_as_a_multiset():
    # pred [cat, cat], gold [cat, cat, sat]: shared = min(2, 2) = 2; P = 2/2, R = 2/3;
    # F1 = 2 * 1 * (2/3) / (5/3) = 4/5 (a set-based count, shared = 1, would give 0.4)
    assert token_f1("cat cat", "cat cat sat") == pytest.approx(0.8)
    # pred "the the cat cat cat" -> [cat, cat, cat]; gold [cat, sat]; shared = min(3, 1) = 1:
    # repeats beyond the gold's count earn nothing. P = 1/3, R = 1/2, F1 = (1/3) / (5/6) = 2/5
    assert token_f1("the the cat cat cat", "cat sat") == pytest.approx(0.4)


def test_token_f1_edge_cases_follow_the_official_no_answer_rule():
    assert token_f1("Paris", "London") == 0.0  # no shared token
    assert token_f1("The", "London") == 0.0  # prediction normalises to nothing, gold does not
    assert token_f1("the", "a") == 1.0  # both normalise to nothing: they agree


def test_max_over_golds_takes_each_metric_over_the_aliases():
    golds = ("Barack Obama", "Obama", "President Obama")
    assert max_over_golds(exact_match, "obama", golds) == 1
    # pred [barack, h, obama] vs
    #   [barack, obama]:    2 shared, P 2/3, R 1   -> F1 4/5 = 0.8
    #   [obama]:            1 shared, P 1/3, R 1   -> F1 (2/3)/(4/3) = 0.5
    #   [president, obama]: 1 shared, P 1/3, R 1/2 -> F1 (1/3)/(5/6) = 0.4
    assert max_over_golds(token_f1, "Barack H. Obama", golds) == pytest.approx(0.8)
    assert max_over_golds(exact_match, "Barack H. Obama", golds) == 0
    with pytest.raises(ValueError):
        max_over_golds(exact_match, "x", ())


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Answer: Paris", "Paris"),
        ("answer:Paris", "Paris"),
        ("Final answer: Paris", "Paris"),
        ("**Answer:** Paris", "Paris"),
        ("**Final Answer**: Paris", "Paris"),
        ("The answer is Paris.", "Paris"),
        ('The final answer is: "Paris"', "Paris"),
        ("Answer: The answer is Paris", "Paris"),
        ("Final answer:\n\n**Paris**", "Paris"),  # label alone on its line: the next line
        ("Paris\nbecause it is the capital.", "Paris"),  # no label: the first non-empty line
        ("\n\n  Paris  \n", "Paris"),
        ("Answer: X\nHmm, let me check.\nFinal answer: Y", "Y"),  # the last labelled line wins
        ("- Paris", "Paris"),
        ("`Paris`", "Paris"),
        ("*Paris*.", "Paris"),
        ("\u201cParis\u201d", "Paris"),
        ("\\boxed{42}", "42"),
        ("$\\boxed{42}$", "42"),
        ("<answer>Paris</answer>", "Paris"),
        ("Answers: Paris", "Answers: Paris"),  # not a label: kept whole
        ("Paris, France", "Paris, France"),  # inner punctuation is left to the normaliser
        ("Answer:", None),
        ("   \n ", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_answer_takes_the_labelled_or_first_line_without_markup(text, expected):
    assert extract_answer(text) == expected


def _problem(*golds: str) -> Problem:
    return Problem(
        id="2hop__1_2", task="musique", question="q", gold=golds, context=(), source_line=1
    )


def test_musique_grade_is_em_and_f1_over_aliases_and_correct_iff_em_is_one():
    task = MusiqueTask()
    problem = _problem("Barack Obama", "Obama")
    hit = task.grade(problem, "Final answer: **Obama**.")
    assert (hit.em, hit.f1, hit.correct) == (1.0, 1.0, True)
    # vs "barack obama": P 2/3, R 1 -> 0.8; vs "obama": P 1/3, R 1 -> 0.5; max 0.8, EM 0
    near = task.grade(problem, "Answer: Barack H. Obama")
    assert near.em == 0.0 and near.f1 == pytest.approx(0.8) and near.correct is False


@pytest.mark.parametrize("text", [None, "", "  \n", "Answer:", "Answer: The."])
def test_musique_grade_is_ungradeable_without_an_answer_span(text):
    grade = MusiqueTask().grade(_problem("Paris"), text)
    assert (grade.em, grade.f1, grade.correct) == (None, None, None)
