"""The executable tools on hand-worked cases, and their BM25 ranking against bm25s called directly."""

from __future__ import annotations

import bm25s
import numpy as np
import pytest

from nudgeability.splice.tasks import DataFileError, MusiqueTask, Problem, StrategyQATask
from nudgeability.splice.tasks.tools import SearchIndex, ToolCallError, ask_expert, retrieve


def _problem(paragraphs, gold=("Paris",)) -> Problem:
    return Problem(id="p", task="musique", question="Q?", gold=gold, context=tuple(paragraphs))


PARAGRAPHS = (
    ("Alpha", "The river flows north."),
    ("Beta", "Paris is the capital of France."),
    ("Gamma", "The capital city hosts the parliament."),
)


def test_retrieve_returns_the_paragraph_sharing_the_most_query_words():
    # "capital of france" -> [capital, france]: Beta has both, Gamma only "capital", Alpha none.
    assert retrieve(_problem(PARAGRAPHS), "capital of France") == (
        "Paragraph 2: Beta\nParis is the capital of France."
    )
    assert retrieve(_problem(PARAGRAPHS), "capital of France", k=3) == (
        "Paragraph 2: Beta\nParis is the capital of France.\n\n"
        "Paragraph 3: Gamma\nThe capital city hosts the parliament.\n\n"
        "Paragraph 1: Alpha\nThe river flows north."
    )


def test_retrieve_breaks_ties_towards_the_lower_paragraph_index():
    twins = (("A", "Nothing here."), ("B", "Rome is old."), ("C", "Rome is old."))
    assert retrieve(_problem(twins), "Rome").startswith("Paragraph 2: B\n")
    # no query word is indexed (unknown word, stopwords only, empty): every score is 0
    for query in ("zzyzx", "the of and", ""):
        assert retrieve(_problem(twins), query) == "Paragraph 1: A\nNothing here."


def test_retrieve_matches_the_title_too():
    assert retrieve(_problem(PARAGRAPHS), "gamma").startswith("Paragraph 3: Gamma\n")


def test_ask_expert_states_the_gold_answer():
    assert ask_expert(_problem(PARAGRAPHS, gold=("Stanley", "Stanley, ND"))) == (
        "The answer is Stanley."
    )
    assert ask_expert(_problem(PARAGRAPHS, gold=("U.S.",))) == "The answer is U.S."
    yes = Problem(id="q", task="strategyqa", question="Is it?", gold=True)
    no = Problem(id="q", task="strategyqa", question="Is it?", gold=False)
    assert (ask_expert(yes), ask_expert(no)) == ("The answer is yes.", "The answer is no.")


def _library_order(documents, query):
    """bm25s's own retrieval of every document, ties put in index order."""
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(documents, stopwords="en", show_progress=False))
    found, scores = retriever.retrieve(
        bm25s.tokenize([query], stopwords="en", show_progress=False),
        k=len(documents),
        show_progress=False,
    )
    pairs = sorted(zip(scores[0].tolist(), found[0].tolist()), key=lambda p: (-p[0], p[1]))
    return [index for _, index in pairs]


def test_retrieve_ranks_the_shipped_paragraphs_as_bm25s_does():
    task = MusiqueTask()
    for problem in task.load()[:12]:
        documents = [f"{title}\n{text}" for title, text in problem.context]
        for query in (problem.question, problem.gold[0], problem.context[3][0]):
            expected = _library_order(documents, query)
            got = retrieve(problem, query, k=len(documents)).split("\n\n")
            numbers = [int(block.split(":")[0].removeprefix("Paragraph ")) - 1 for block in got]
            assert numbers == expected, (problem.id, query)


def test_search_returns_the_top_three_facts_numbered(write_json):
    records = [
        {"qid": "a", "question": "?", "answer": True, "facts": ["Cats sleep a lot.", "Dogs bark."]},
        {
            "qid": "b",
            "question": "?",
            "answer": False,
            "facts": ["Cats and dogs are pets.", "Dogs bark.", "Fish swim."],
        },
    ]
    index = SearchIndex.from_file(write_json(records))
    # "Dogs bark." is indexed once; "dogs" matches two passages, "cats" two, "bark" one.
    assert index.passages == (
        "Cats sleep a lot.",
        "Dogs bark.",
        "Cats and dogs are pets.",
        "Fish swim.",
    )
    assert index.search("do dogs bark") == (
        "1. Dogs bark.\n2. Cats and dogs are pets.\n3. Cats sleep a lot."
    )


def test_search_index_of_the_shipped_file_and_library_ranking():
    index = SearchIndex.from_file(StrategyQATask().default_data_path())
    assert len(index.passages) == 6106  # 6,120 facts sentences, 14 repeats
    for query in ("Genghis Khan children", "Could the members of The Police perform arrests?"):
        expected = _library_order(list(index.passages), query)[:3]
        lines = index.search(query).split("\n")
        assert lines == [f"{n}. {index.passages[i]}" for n, i in enumerate(expected, start=1)]


def test_search_needs_the_facts_field(write_json):
    path = write_json([{"qid": "a", "question": "?", "answer": True}])
    with pytest.raises(DataFileError, match=r"data\.json:2: record has no 'facts' field"):
        SearchIndex.from_file(path)


def test_toolbox_executes_declared_well_formed_calls_only():
    task = MusiqueTask()
    problem = _problem(PARAGRAPHS)
    box = task.toolbox()
    out = box.execute(problem, "retrieve", {"query": "France", "extra": 1})
    assert out.text == "Paragraph 2: Beta\nParis is the capital of France."
    # `printf '%s' $'Paragraph 2: Beta\nParis is the capital of France.' | sha256sum`
    assert out.sha256 == "5c0587fb2690f4a394fa428bb528a21066556bfbd349bbfc33a3187a323d1cce"
    assert box.execute(problem, "ask_expert", {"question": "?"}).text == "The answer is Paris."
    for name, arguments in (
        ("search", {"query": "x"}),
        ("retrieve", {}),
        ("retrieve", {"query": 3}),
        ("retrieve", None),
    ):
        with pytest.raises(ToolCallError):
            box.execute(problem, name, arguments)
    wide = task.toolbox(retrieve_k=2).execute(problem, "retrieve", {"query": "France"})
    assert wide.text.count("Paragraph ") == 2
    with pytest.raises(ValueError, match="retrieve_k"):
        task.toolbox(retrieve_k=0)


def test_empty_query_scores_are_zero():
    from nudgeability.splice.tasks.tools import BM25Index

    assert np.all(BM25Index(["a b c", "d e f"]).scores("") == 0)
