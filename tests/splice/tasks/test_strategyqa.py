"""StrategyQA loading (the official JSON array), its bad inputs, and the yes/no answer table."""

from __future__ import annotations

import json

import pytest

from nudgeability.splice.tasks import DataFileError, EmptyDatasetError, Problem, StrategyQATask


def _record(qid: str, answer: bool = True, question: str = "Is it?") -> dict:
    return {
        "qid": qid,
        "term": "T",
        "description": "D",
        "facts": ["f"],
        "answer": answer,
        "question": question,
        "decomposition": ["d"],
    }


def test_load_reads_the_array_with_the_line_each_record_starts_on(write_json):
    path = write_json([_record("q1", True, "A?"), _record("q2", False, "B?")])
    problems = StrategyQATask().load(path)
    assert [(p.id, p.question, p.gold) for p in problems] == [
        ("q1", "A?", True),
        ("q2", "B?", False),
    ]
    # indent=2 layout: line 1 "[", line 2 "  {", 7 keys on lines 3-13 (5 one-line keys, and
    # "facts" and "decomposition" take 3 lines each), line 14 "  },", so record 2 opens on line 15
    assert [p.source_line for p in problems] == [2, 15]
    assert problems[0].context == () and problems[0].task == "strategyqa"


def test_truncated_file_names_the_line_it_was_cut_on(write_json):
    path = write_json([_record("q1"), _record("q2"), _record("q3", question="Was it cut?")])
    text = path.read_text()
    cut = text.index("Was it cut") + 3  # inside the third record's question string
    path.write_text(text[:cut])
    with pytest.raises(DataFileError) as error:
        StrategyQATask().load(path)
    expected_line = text[:cut].count("\n") + 1  # the unterminated string starts on this line
    quote = text.index("Was it cut") - 1  # the string's opening quote, 1-based column below
    column = quote - text.rindex("\n", 0, quote)
    assert str(error.value).startswith(
        f"{path}:{expected_line}: not valid JSON (Unterminated string starting at column {column});"
    )  # said once, whole (issue 25, case 4: not "starting at at column")
    assert "truncated" in str(error.value) and "\n" not in str(error.value)


def test_file_cut_between_records_says_it_ends_inside_the_array(write_json):
    path = write_json([_record("q1"), _record("q2")])
    text = path.read_text()
    path.write_text(text[: text.index("},") + 1])  # just after record 1's closing brace
    with pytest.raises(
        DataFileError,
        match=r":14: expected ',' or ']' after a record, the file "
        r"ends inside the array",
    ):
        StrategyQATask().load(path)


def test_record_without_answer_names_the_field_and_line(write_json):
    broken = _record("q2")
    del broken["answer"]
    path = write_json([_record("q1"), broken])
    with pytest.raises(DataFileError) as error:
        StrategyQATask().load(path)
    # record 2 opens on line 15 (see the layout above)
    assert str(error.value) == (
        f"{path}:15: record has no 'answer' field; it must be true or false"
    )
    assert error.value.field == "answer"


def test_answer_must_be_a_boolean(write_json):
    path = write_json([_record("q1") | {"answer": "yes"}])
    with pytest.raises(
        DataFileError, match=r":2: field 'answer' must be true or false, found \"yes\""
    ):
        StrategyQATask().load(path)


def test_empty_array_is_an_empty_dataset(write_json):
    with pytest.raises(EmptyDatasetError, match="holds no records"):
        StrategyQATask().load(write_json([]))


def test_a_file_that_is_not_an_array_is_refused(write_json):
    with pytest.raises(DataFileError, match=r":1: expected one JSON array"):
        StrategyQATask().load(write_json({"qid": "q1"}))


def test_text_after_the_array_is_refused(write_json):
    path = write_json([_record("q1")])
    path.write_text(path.read_text() + "\n[]")
    with pytest.raises(DataFileError, match="unexpected text after the closing"):
        StrategyQATask().load(path)


def test_repeated_qid_is_refused(write_json):
    with pytest.raises(DataFileError, match=r"qid 'q1' repeats the record on line 2"):
        StrategyQATask().load(write_json([_record("q1"), _record("q1")]))


def test_jsonl_records_are_not_mistaken_for_an_array(tmp_path):
    path = tmp_path / "wrong.json"
    path.write_text(json.dumps(_record("q1")) + "\n" + json.dumps(_record("q2")) + "\n")
    with pytest.raises(DataFileError, match=r":1: the file is JSON Lines .* not one JSON array"):
        StrategyQATask().load(path)


# What a model might write after its thinking, and how it reads against gold = yes.
# None means ungradeable (correct None).
@pytest.mark.parametrize(
    "text, reads_as",
    [
        ("Yes", True),
        ("yes.", True),
        ("YES!", True),
        ("True", True),
        ("true.", True),
        ("Yes, because the Mongols had many children.", True),
        ("Yes because of genetics.", True),
        ("Yes - it is well documented.", True),
        ("**Yes**, since ...", True),
        ("Answer: yes", True),
        ("Final answer: **Yes**", True),
        ("The answer is yes.", True),
        ("Yes\nExplanation: the second line is ignored.", True),
        ("(Yes)", True),
        ("No", False),
        ("no!", False),
        ("False", False),
        ("No; Caesar had only three children.", False),
        ("Answer: No, as shown above.", False),
        ("Yes and no", None),
        ("Yes/No", None),
        ("No idea", None),
        ("Nope", None),
        ("Not really", None),
        ("Maybe", None),
        ("yesterday", None),
        ("It depends.", None),
        ("Answer:", None),
        ("", None),
        (None, None),
    ],
)
def test_yes_no_answers_are_parsed_robustly_and_the_rest_is_ungradeable(text, reads_as):
    problem = Problem(id="q", task="strategyqa", question="?", gold=True)
    grade = StrategyQATask().grade(problem, text)
    if reads_as is None:
        assert (grade.em, grade.f1, grade.correct) == (None, None, None)
    else:
        assert grade.correct is reads_as and grade.em == float(reads_as) and grade.f1 is None


def test_grade_compares_with_a_false_gold():
    problem = Problem(id="q", task="strategyqa", question="?", gold=False)
    assert StrategyQATask().grade(problem, "No.").correct is True
    assert StrategyQATask().grade(problem, "Yes.").correct is False
