"""What a task hands the rest of the run: its `Problem`s, the `GradeRecord` of a graded answer, and
the errors of a data file the user can fix.

The bottom of splice/: the run format (splice/rundir/records.py) stores a `GradeRecord`
as the task made it, and every task module, the tool index and the readers import from here, so
no task imports the experiment it feeds. Standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


class DataFileError(ValueError):
    """A data file the user can fix: the message names the file, and the line and field if known."""

    def __init__(
        self,
        path: str | os.PathLike,
        message: str,
        *,
        line: int | None = None,
        field: str | None = None,
    ):
        self.path = str(path)
        self.line = line
        self.field = field
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {message}")


class EmptyDatasetError(DataFileError):
    """The file holds no usable problem (none at all, or none left after filtering)."""


@dataclass(frozen=True)
class Problem:
    """One question with a verifiable answer.

    `gold` is a tuple of gold strings for MuSiQue (`(answer, *answer_aliases)`) and a bool for
    StrategyQA. `context` is task-specific and made of tuples so the problem stays hashable and
    JSON-serialisable (MuSiQue: its paragraphs as `(title, text)` pairs; StrategyQA: empty).
    `source_line` is the 1-based line of the file where the record starts, for error messages.
    """

    id: str
    task: str
    question: str
    gold: tuple[str, ...] | bool
    context: tuple = ()
    source_line: int = 0


@dataclass(frozen=True)
class GradeRecord:
    """A graded answer. `correct` is None when the answer cannot be graded."""

    em: float | None
    f1: float | None
    correct: bool | None
