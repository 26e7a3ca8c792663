"""The shipped data files (unchanged copies, loadable as the defaults) and the task registry."""

from __future__ import annotations

import hashlib
import importlib.resources

import pytest

from nudgeability.splice.tasks import TASK_NAMES, UnknownTaskError, get_task

# From splice/data/README.md (provenance of the samples).
SHIPPED = {
    "musique": (
        "musique_ans_dev_sample.jsonl",
        1_743_177,
        "0773007ad3e21f289918df8dcfd9f921f0f041d2c0ca33c073759996e1a503a2",
    ),
    "strategyqa": (
        "strategyqa_train.json",
        1_452_650,
        "5fbefbb143d2cb31edacb6e244b26763b7a146690f28eabebec759e1c4190284",
    ),
}


@pytest.mark.parametrize("name", TASK_NAMES)
def test_shipped_file_is_the_unchanged_copy_and_is_the_default(name):
    filename, size, sha256 = SHIPPED[name]
    path = get_task(name).default_data_path()
    assert path.name == filename
    data = path.read_bytes()
    assert (len(data), hashlib.sha256(data).hexdigest()) == (size, sha256)
    # installed as package data of nudgeability.splice
    assert importlib.resources.files("nudgeability.splice").joinpath("data", filename).is_file()


def test_shipped_musique_loads_145_two_hop_problems_with_20_paragraphs():
    problems = get_task("musique").load()
    assert len(problems) == 145
    assert all(p.id.startswith("2hop__") and len(p.context) == 20 for p in problems)
    first = problems[0]
    assert (first.id, first.gold[0], first.source_line) == ("2hop__574419_270105", "Stanley", 1)
    assert first.question == "What is the seat of the county where Van Hook Township is located?"


def test_shipped_strategyqa_loads_all_2290_records():
    problems = get_task("strategyqa").load()
    assert len(problems) == 2290
    assert sum(p.gold for p in problems) == 1071  # 1,071 true and 1,219 false, per the README
    first = problems[0]
    assert (first.id, first.gold) == ("b8677742616fef051f00", True)
    assert first.question == "Are more people today related to Genghis Khan than Julius Caesar?"


def test_shipped_data_readme_names_licences_citations_and_hashes():
    readme = importlib.resources.files("nudgeability.splice").joinpath("data", "README.md")
    text = readme.read_text(encoding="utf-8")
    for fragment in (
        "CC BY 4.0",
        "Trivedi",
        "Geva",
        "MIT",
        SHIPPED["musique"][2],
        SHIPPED["strategyqa"][2],
    ):
        assert fragment in text


def test_get_task_returns_each_task_by_name():
    assert TASK_NAMES == ("musique", "strategyqa")
    for name in TASK_NAMES:
        assert get_task(name).name == name


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(UnknownTaskError) as error:
        get_task("hotpotqa")
    assert str(error.value) == "unknown task 'hotpotqa'; known tasks: musique, strategyqa"
    assert isinstance(error.value, ValueError)
