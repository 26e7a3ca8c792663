"""StrategyQA: implicit multi-step yes/no questions (Geva et al., TACL 2021).

Reads the official `strategyqa_train.json` format: one JSON array of records with `qid`,
`question` and `answer` (bool) (plus `term`, `description`, `facts`, `decomposition` and sometimes
`evidence`, which the prompts do not use: facts and decomposition would give the answer away).
The tool is a scoped `search(query)` that returns evidence passages; calls are never executed
during measurement. The optional resolution phase executes them on an index of the file's `facts`
(a scoped stand-in for the web: see `tools.py`). The answer is parsed to yes/no
(`scoring.parse_yes_no`) and compared with the boolean; anything else is ungradeable.
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
from nudgeability.splice.tasks.reading import read_json_array, require
from nudgeability.splice.tasks.scoring import labelled_answer, parse_yes_no
from nudgeability.splice.tasks.tools import SearchIndex

# ---- All of this task's prompt wording -----------------------------------------------------------
_INTRO = "You answer yes/no questions that need several implicit reasoning steps."
_ANSWER_FORMAT = "give your final answer on its own line as `Answer: yes` or `Answer: no`"
SYSTEM_UNAIDED = f"{_INTRO}\nThink the question through first. Then {_ANSWER_FORMAT}."
SYSTEM_WITH_TOOL = (
    f"{_INTRO}\nYou can call the `{{tool}}` tool: {{tool_use}}\n"
    f"Think the question through first. Then do exactly one of these: {_ANSWER_FORMAT}; or call "
    f"`{{tool}}`."
)
SEARCH_USE = "it searches a scoped web index and returns evidence passages for a query."
SEARCH_TOOL = (
    "search",
    "Search a scoped web index and return evidence passages relevant to the query.",
    {"query": "The search query."},
)
USER = "Question: {question}"
# ---------------------------------------------------------------------------------------------------


class StrategyQATask(Task):
    """StrategyQA (train split): yes/no questions, gold is a bool."""

    name = "strategyqa"
    tool_names = (SEARCH_TOOL[0],)
    data_filename = "strategyqa_train.json"
    system_unaided = SYSTEM_UNAIDED
    system_with_tool = SYSTEM_WITH_TOOL
    tool = SEARCH_TOOL
    tool_use = SEARCH_USE

    def load(self, path: str | os.PathLike | None = None) -> list[Problem]:
        """Read an official StrategyQA JSON array into problems, in file order.

        Each record needs `qid` (string, unique), `question` (string) and `answer` (true/false).
        Raises `DataFileError` naming the file, the line the record starts on and the field, and
        `EmptyDatasetError` for an empty array.
        """
        path = self.default_data_path() if path is None else path
        problems: list[Problem] = []
        first_line: dict[str, int] = {}
        for line, record in read_json_array(path):
            qid = require(record, "qid", str, "a string id", path, line)
            question = require(record, "question", str, "the question text", path, line)
            answer = require(record, "answer", bool, "true or false", path, line)
            if qid in first_line:
                raise DataFileError(
                    path,
                    f"qid '{qid}' repeats the record on line {first_line[qid]}; ids must be unique",
                    line=line,
                    field="qid",
                )
            first_line[qid] = line
            problems.append(
                Problem(
                    id=qid,
                    task=self.name,
                    question=question,
                    gold=answer,
                    context=(),
                    source_line=line,
                )
            )
        if not problems:
            raise EmptyDatasetError(
                path, "the array holds no records; pass the official strategyqa_train.json"
            )
        return problems

    def user_text(self, problem: Problem) -> str:
        """The question alone."""
        return USER.format(question=problem.question)

    def tool_function(self, data_path: str | os.PathLike | None = None, *, retrieve_k: int = 1):
        """`search`: the top 3 of the data file's `facts` by BM25 (tools.py); `retrieve_k` is
        MuSiQue's and is not used. Raises `DataFileError` when the file has no `facts`."""
        index = SearchIndex.from_file(self.default_data_path() if data_path is None else data_path)
        return lambda problem, arguments: index.search(arguments["query"])

    def holds_answer(self, text: str) -> bool:
        """A labelled line whose span reads as yes/no (`Answer: yes`)."""
        return parse_yes_no(labelled_answer(text)) is not None

    def grade(self, problem: Problem, answer_text: str | None) -> GradeRecord:
        """Parsed yes/no against the gold bool: em = 1.0/0.0, f1 = None (undefined for yes/no).

        All fields are None when the answer is not a readable yes/no.
        """
        parsed = parse_yes_no(answer_text)
        if parsed is None:
            return GradeRecord(em=None, f1=None, correct=None)
        correct = parsed == problem.gold
        return GradeRecord(em=float(correct), f1=None, correct=correct)

    def answer_key(self, answer_text: str | None) -> str | None:
        """ "yes" or "no" as `grade` parses it; None when not a readable yes/no."""
        parsed = parse_yes_no(answer_text)
        return None if parsed is None else ("yes" if parsed else "no")
