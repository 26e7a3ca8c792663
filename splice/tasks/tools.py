"""The executable tools: what a declared tool returns when the resolution phase calls it.

Measurement never executes a call (splice/README.md, "Problems and prompts"); the optional
resolution phase (`nudge run --resolve`, see `splice/run/units/resolve.py`) does, once per TOOL record. Every tool here is
deterministic and offline, so a resolution is a pure function of the record and the data file:

- **MuSiQue `retrieve(query)`**: BM25 (the `bm25s` library, Lucene variant, k1 = 1.5, b = 0.75,
  English stopwords, no stemming) over the problem's own supplied paragraphs, each indexed as
  its title and text. The best paragraph is returned, as the prompt promises ("the most relevant
  of the supplied paragraphs"); `retrieve_k` > 1 returns the k best in rank order. Equal scores
  go to the lower paragraph index, so a query sharing no word with any paragraph returns
  Paragraph 1. A paragraph is written as in the prompt: `Paragraph N: title` then its text.
- **StrategyQA `search(query)`**: the prompt promises "a scoped web index". It is a stand-in
  built from the `facts` field of the StrategyQA file in use: the annotated evidence sentences of
  *every* question of the file (6,120 sentences, 6,106 distinct, in the shipped train file;
  repeated sentences are indexed once). The top 3 by the same BM25 are returned, numbered, one
  per line. The index is scoped, not the web, and its passages include other questions'
  evidence, which may or may not help: this is a scoped stand-in, not an oracle.
- **`ask_expert(question)`**: the gold answer in one short sentence, `The answer is X.` (MuSiQue:
  the first gold string; StrategyQA: yes or no), which is what the oracle condition promises. The
  question argument is not read.

A call is executed only when its tool is declared by the prompt it was made under and its
arguments give every required parameter of the declaration as a string (extra keys are ignored);
otherwise `ToolCallError` says why and nothing is run.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from nudgeability.splice.tasks.problem import DataFileError, Problem
from nudgeability.splice.tasks.reading import read_json_array, require

BM25_STOPWORDS = "en"
DEFAULT_RETRIEVE_K = 1
SEARCH_K = 3
PARAGRAPH = "Paragraph {number}: {title}\n{text}"
PASSAGE = "{number}. {text}"
EXPERT_ANSWER = "The answer is {answer}"


class ToolCallError(ValueError):
    """A call that is not executed: its tool is not declared or its arguments do not fit."""


@dataclass(frozen=True)
class ToolOutput:
    """One executed call: the tool, its arguments and the text it returned."""

    name: str
    arguments: dict
    text: str

    @property
    def sha256(self) -> str:
        """sha256 of the result text in UTF-8 (the resolution records' `result_sha256`)."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


# ---- BM25 ------------------------------------------------------------------------------------------


# bm25s is imported where an index is built or queried, not with this module: with numba, which
# it imports, it holds tens of MiB resident (benchmarks/demo_memory.py), which a run that resolves
# no tool call never needs.


def _tokens(texts: Sequence[str]) -> list[list[str]]:
    import bm25s

    return bm25s.tokenize(
        list(texts), stopwords=BM25_STOPWORDS, return_ids=False, show_progress=False
    )


class BM25Index:
    """A BM25 index over a fixed list of documents; `rank` orders them for a query."""

    def __init__(self, documents: Sequence[str]):
        if not documents:
            raise ValueError("a BM25 index needs at least one document")
        self.size = len(documents)
        self._retriever = None  # stays None when no document has an indexable word
        import bm25s

        tokenized = bm25s.tokenize(list(documents), stopwords=BM25_STOPWORDS, show_progress=False)
        if tokenized.vocab:
            self._retriever = bm25s.BM25()
            self._retriever.index(tokenized, show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every document for `query` (all 0 when no query word is indexed)."""
        words = _tokens([query])[0]
        if not words or self._retriever is None:  # bm25s cannot score these; nothing matches
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self._retriever.get_scores(words))

    def rank(self, query: str, k: int) -> list[int]:
        """The indices of the k best documents, best first; equal scores go to the lower index."""
        scores = self.scores(query)
        order = np.lexsort((np.arange(self.size), -scores))  # last key is the primary one
        return [int(i) for i in order[:k]]


# ---- the tools -------------------------------------------------------------------------------------


def retrieve(problem: Problem, query: str, k: int = DEFAULT_RETRIEVE_K) -> str:
    """The k most relevant of the problem's supplied paragraphs for `query` (see module docstring)."""
    paragraphs = problem.context
    index = BM25Index([f"{title}\n{text}" for title, text in paragraphs])
    return "\n\n".join(
        PARAGRAPH.format(number=i + 1, title=paragraphs[i][0], text=paragraphs[i][1])
        for i in index.rank(query, k)
    )


def ask_expert(problem: Problem) -> str:
    """`The answer is X.` with the problem's gold answer (a final period is not doubled)."""
    if isinstance(problem.gold, bool):
        answer = "yes" if problem.gold else "no"
    else:
        answer = problem.gold[0]
    return EXPERT_ANSWER.format(answer=answer) + ("" if answer.endswith(".") else ".")


class SearchIndex:
    """StrategyQA's scoped search index: the distinct `facts` sentences of one data file."""

    def __init__(self, passages: Sequence[str]):
        self.passages = tuple(dict.fromkeys(passages))  # distinct, first occurrence order
        self._index = BM25Index(self.passages)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> SearchIndex:
        """Read every record's `facts` (a list of strings) from a StrategyQA JSON array.

        Raises `DataFileError` naming the file, line and field when a record lacks them.
        """
        return _search_index(os.path.abspath(path))

    def search(self, query: str, k: int = SEARCH_K) -> str:
        """The k best passages for `query`, numbered from 1, one per line."""
        return "\n".join(
            PASSAGE.format(number=n, text=self.passages[i])
            for n, i in enumerate(self._index.rank(query, k), start=1)
        )


@lru_cache(maxsize=4)
def _search_index(path: str) -> SearchIndex:
    facts: list[str] = []
    for line, record in read_json_array(path):
        values = require(
            record, "facts", list, "a list of evidence sentences (the search index)", path, line
        )
        if not all(isinstance(value, str) for value in values):
            raise DataFileError(path, "field 'facts' must hold strings", line=line, field="facts")
        facts.extend(values)
    if not facts:
        raise DataFileError(
            path, "no record has 'facts': the search tool has nothing to index", field="facts"
        )
    return SearchIndex(facts)


# ---- executing a call ------------------------------------------------------------------------------

ToolFunction = Callable[[Problem, dict], str]


@dataclass(frozen=True)
class Toolbox:
    """The executable tools of one run, by name, with the declarations their calls are checked on.

    `functions` maps a tool name to `f(problem, arguments) -> result text`; `declarations` maps it
    to its OpenAI-format declaration (the one the prompt showed).
    """

    functions: dict[str, ToolFunction]
    declarations: dict[str, dict]

    def execute(self, problem: Problem, name: str, arguments: dict | None) -> ToolOutput:
        """Run one call; `ToolCallError` (nothing run) when it is undeclared or its arguments do not
        give every required parameter as a string."""
        if name not in self.functions or name not in self.declarations:
            raise ToolCallError(f"tool {name!r} is not declared")
        if not isinstance(arguments, dict):
            raise ToolCallError(f"the arguments of {name!r} are not an object")
        required = self.declarations[name]["function"]["parameters"].get("required", [])
        for parameter in required:
            if not isinstance(arguments.get(parameter), str):
                raise ToolCallError(f"{name!r} needs the string argument {parameter!r}")
        return ToolOutput(name, dict(arguments), self.functions[name](problem, arguments))
