"""MuSiQue: two-hop reading comprehension over 20 supplied paragraphs (Trivedi et al., TACL 2022).

Reads the official `musique_ans_v1.0_dev.jsonl` format (one record per line: `id`, `paragraphs`
[{`idx`, `title`, `paragraph_text`, `is_supporting`}], `question`, `question_decomposition`,
`answer`, `answer_aliases`, `answerable`) and keeps two-hop questions (ids starting `2hop__`) by
default, as the paper does. The tool is `retrieve(query)`, which returns the most relevant of the
supplied paragraphs. Grading is the official scorer (see `scoring.py`): correct means EM = 1.
"""

from __future__ import annotations

import os

from nudgeability.splice.rundir.records import GradeRecord
from nudgeability.splice.tasks.base import (
    DataFileError,
    EmptyDatasetError,
    Problem,
    Task,
)
from nudgeability.splice.tasks.reading import read_jsonl, require
from nudgeability.splice.tasks.scoring import (
    answer_tokens,
    exact_match,
    extract_answer,
    max_over_golds,
    normalize_answer,
    token_f1,
)
from nudgeability.splice.tasks.tools import retrieve

# ---- All of this task's prompt wording -----------------------------------------------------------
_INTRO = (
    "You answer questions that combine two facts from the paragraphs supplied with the question."
)
_ANSWER_FORMAT = (
    "give your final answer on its own line as `Answer: <answer>`, where <answer> "
    "is a short phrase (a name, date, number or place) with no explanation"
)
SYSTEM_UNAIDED = f"{_INTRO}\nThink the question through first. Then {_ANSWER_FORMAT}."
SYSTEM_WITH_TOOL = (
    f"{_INTRO}\nYou can call the `{{tool}}` tool: {{tool_use}}\n"
    f"Think the question through first. Then do exactly one of these: {_ANSWER_FORMAT}; or call "
    f"`{{tool}}`."
)
RETRIEVE_USE = "it returns the most relevant of the supplied paragraphs for a query."
RETRIEVE_TOOL = (
    "retrieve",
    "Return the most relevant of the supplied paragraphs for a query.",
    {"query": "What to look for in the supplied paragraphs."},
)
PARAGRAPH = "Paragraph {number}: {title}\n{text}"
USER = "{paragraphs}\n\nQuestion: {question}"
# ---------------------------------------------------------------------------------------------------

TWO_HOP_PREFIX = "2hop__"


class MusiqueTask(Task):
    """MuSiQue-Ans. `id_prefix` keeps the ids that start with it (None keeps every record)."""

    name = "musique"
    tool_names = (RETRIEVE_TOOL[0],)
    data_filename = "musique_ans_dev_sample.jsonl"
    system_unaided = SYSTEM_UNAIDED
    system_with_tool = SYSTEM_WITH_TOOL
    tool = RETRIEVE_TOOL
    tool_use = RETRIEVE_USE

    def __init__(self, id_prefix: str | None = TWO_HOP_PREFIX):
        self.id_prefix = id_prefix

    def load(self, path: str | os.PathLike | None = None) -> list[Problem]:
        """Read an official MuSiQue JSONL file into problems, keeping ids that start `id_prefix`.

        Golds are `(answer, *answer_aliases)` (`answer_aliases` may be absent). Raises
        `DataFileError` for a broken line, a missing or mistyped field or a repeated id, and
        `EmptyDatasetError` when no record is left after filtering.
        """
        path = self.default_data_path() if path is None else path
        problems: list[Problem] = []
        first_line: dict[str, int] = {}
        records = read_jsonl(path)
        for line, record in records:
            problem = _problem(record, path, line)
            if problem.id in first_line:
                raise DataFileError(
                    path,
                    f"id '{problem.id}' repeats the record on line "
                    f"{first_line[problem.id]}; ids must be unique",
                    line=line,
                    field="id",
                )
            first_line[problem.id] = line
            if self.id_prefix is None or problem.id.startswith(self.id_prefix):
                problems.append(problem)
        if not records:
            raise EmptyDatasetError(
                path, "the file holds no records; pass an official MuSiQue JSONL file"
            )
        if not problems:
            raise EmptyDatasetError(
                path,
                f"none of its {len(records)} records has an id starting "
                f"'{self.id_prefix}'; pass a file with two-hop questions, or keep all hops",
                field="id",
            )
        return problems

    def user_text(self, problem: Problem) -> str:
        """The numbered paragraphs, then the question."""
        paragraphs = "\n\n".join(
            PARAGRAPH.format(number=number, title=title, text=text)
            for number, (title, text) in enumerate(problem.context, start=1)
        )
        return USER.format(paragraphs=paragraphs, question=problem.question)

    def tool_function(self, data_path: str | os.PathLike | None = None, *, retrieve_k: int = 1):
        """`retrieve`: BM25 over the problem's own paragraphs, the `retrieve_k` best (tools.py).

        The paragraphs travel with each problem, so the data file is not read again.
        """
        if isinstance(retrieve_k, bool) or not isinstance(retrieve_k, int) or retrieve_k < 1:
            raise ValueError(f"retrieve_k={retrieve_k!r}: must be a whole number >= 1")
        return lambda problem, arguments: retrieve(problem, arguments["query"], retrieve_k)

    def grade(self, problem: Problem, answer_text: str | None) -> GradeRecord:
        """Official EM and F1, each maxed over the golds; correct ⇔ EM = 1.

        Ungradeable (all None) when no answer span can be extracted or the span normalises to
        nothing (only punctuation and articles).
        """
        span = extract_answer(answer_text)
        if span is None or not answer_tokens(span):
            return GradeRecord(em=None, f1=None, correct=None)
        em = float(max_over_golds(exact_match, span, problem.gold))
        f1 = float(max_over_golds(token_f1, span, problem.gold))
        return GradeRecord(em=em, f1=f1, correct=em == 1.0)

    def answer_key(self, answer_text: str | None) -> str | None:
        """The official normalisation of the answer span: two answers agree when their EM is 1."""
        span = extract_answer(answer_text)
        if span is None or not answer_tokens(span):
            return None
        return normalize_answer(span)


def _problem(record: object, path: str | os.PathLike, line: int) -> Problem:
    problem_id = require(record, "id", str, "a string such as '2hop__460946_294723'", path, line)
    question = require(record, "question", str, "the question text", path, line)
    answer = require(record, "answer", str, "the gold answer string", path, line)
    aliases = record.get("answer_aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(alias, str) for alias in aliases):
        raise DataFileError(
            path,
            "field 'answer_aliases' must be a list of strings",
            line=line,
            field="answer_aliases",
        )
    paragraphs = require(
        record, "paragraphs", list, "a list of {title, paragraph_text} objects", path, line
    )
    if not paragraphs:
        raise DataFileError(
            path,
            "field 'paragraphs' is empty; MuSiQue supplies 20 paragraphs",
            line=line,
            field="paragraphs",
        )
    context = []
    for index, paragraph in enumerate(paragraphs):
        where = f"paragraphs[{index}]"
        title = require(paragraph, "title", str, f"a string (in {where})", path, line)
        text = require(paragraph, "paragraph_text", str, f"a string (in {where})", path, line)
        context.append((title, text))
    return Problem(
        id=problem_id,
        task=MusiqueTask.name,
        question=question,
        gold=(answer, *aliases),
        context=tuple(context),
        source_line=line,
    )
