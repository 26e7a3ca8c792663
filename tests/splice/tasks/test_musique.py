"""MuSiQue loading: the official record format, the two-hop filter, and each malformed input."""

from __future__ import annotations

import json

import pytest

from nudgeability.splice.tasks import DataFileError, EmptyDatasetError, MusiqueTask


def test_load_keeps_two_hop_ids_in_file_order_by_default(musique_record, write_jsonl):
    path = write_jsonl(
        [
            musique_record("2hop__a"),
            musique_record("3hop1__b"),
            musique_record("4hop3__c"),
            musique_record("2hop__d"),
        ]
    )
    assert [p.id for p in MusiqueTask().load(path)] == ["2hop__a", "2hop__d"]
    assert [p.id for p in MusiqueTask(id_prefix=None).load(path)] == [
        "2hop__a",
        "3hop1__b",
        "4hop3__c",
        "2hop__d",
    ]


def test_load_builds_golds_paragraphs_and_source_lines(musique_record, write_jsonl):
    path = write_jsonl(
        [
            musique_record("2hop__a"),
            musique_record("2hop__b", answer="Barack Obama", aliases=("Obama",), question="Who?"),
        ]
    )
    problem = MusiqueTask().load(path)[1]
    assert problem.id == "2hop__b" and problem.task == "musique" and problem.question == "Who?"
    assert problem.gold == ("Barack Obama", "Obama")
    assert problem.context[0] == ("Title 0", "Text 0.") and len(problem.context) == 20
    assert problem.source_line == 2
    hash(problem)  # frozen and made of tuples: usable as a key


def test_line_separator_characters_inside_strings_do_not_split_a_record(tmp_path, musique_record):
    path = tmp_path / "raw.jsonl"
    records = [
        musique_record("2hop__a", question="Who\u2028wrote\x85it?"),
        musique_record("2hop__b"),
    ]
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8"
    )
    problems = MusiqueTask().load(path)
    assert [p.question for p in problems] == ["Who\u2028wrote\x85it?", "Where?"]
    assert [p.source_line for p in problems] == [1, 2]


def test_missing_answer_aliases_means_the_answer_is_the_only_gold(musique_record, write_jsonl):
    record = musique_record("2hop__a", answer="Rome")
    del record["answer_aliases"]
    assert MusiqueTask().load(write_jsonl([record]))[0].gold == ("Rome",)


def test_truncated_json_line_names_the_file_and_line(musique_record, write_jsonl):
    cut = json.dumps(musique_record("2hop__c"))[:150]  # a download cut mid-record
    path = write_jsonl([musique_record("2hop__a"), musique_record("2hop__b"), cut])
    with pytest.raises(DataFileError) as error:
        MusiqueTask().load(path)
    message = str(error.value)
    assert message.startswith(f"{path}:3: not valid JSON")
    assert "truncated" in message and "\n" not in message
    assert error.value.line == 3


def test_record_without_answer_names_the_field_file_and_line(musique_record, write_jsonl):
    broken = musique_record("2hop__b")
    del broken["answer"]
    # a blank line 2 is skipped but still counted: the broken record is on line 3
    path = write_jsonl([musique_record("2hop__a"), "", broken])
    with pytest.raises(DataFileError) as error:
        MusiqueTask().load(path)
    assert str(error.value).startswith(f"{path}:3: record has no 'answer' field")
    assert (error.value.line, error.value.field) == (3, "answer")


@pytest.mark.parametrize(
    "field, value, fragment",
    [
        ("answer", 42, "field 'answer' must be the gold answer string, found 42"),
        ("id", None, "field 'id' must be a string"),
        ("answer_aliases", "Obama", "field 'answer_aliases' must be a list of strings"),
        ("paragraphs", [], "field 'paragraphs' is empty"),
        (
            "paragraphs",
            [{"title": "T"}],
            "record has no 'paragraph_text' field; it must be a string (in paragraphs[0])",
        ),
    ],
)
def test_mistyped_fields_name_the_field(musique_record, write_jsonl, field, value, fragment):
    record = musique_record("2hop__a")
    record[field] = value
    with pytest.raises(DataFileError, match=r":1: ") as error:
        MusiqueTask().load(write_jsonl([record]))
    assert fragment in str(error.value)


def test_a_line_that_is_not_an_object_is_refused(write_jsonl):
    with pytest.raises(DataFileError, match=r":1: expected a JSON object, found list"):
        MusiqueTask().load(write_jsonl(["[1, 2]"]))


def test_empty_dataset_after_filtering_names_the_file_and_the_filter(musique_record, write_jsonl):
    path = write_jsonl([musique_record("3hop1__a"), musique_record("4hop1__b")])
    with pytest.raises(EmptyDatasetError) as error:
        MusiqueTask().load(path)
    message = str(error.value)
    assert message.startswith(f"{path}: none of its 2 records has an id starting '2hop__'")
    assert error.value.field == "id"


def test_empty_file_is_an_empty_dataset(write_jsonl):
    with pytest.raises(EmptyDatasetError, match="holds no records"):
        MusiqueTask().load(write_jsonl([]))


def test_repeated_id_names_both_lines(musique_record, write_jsonl):
    path = write_jsonl([musique_record("2hop__a"), musique_record("2hop__a")])
    with pytest.raises(DataFileError, match=r":2: id '2hop__a' repeats the record on line 1"):
        MusiqueTask().load(path)


def test_non_utf8_file_is_refused_with_its_name(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes('{"id": "2hop__\xe9"}\n'.encode("latin-1"))
    with pytest.raises(DataFileError, match="not UTF-8"):
        MusiqueTask().load(path)


def test_missing_file_is_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        MusiqueTask().load(tmp_path / "absent.jsonl")
