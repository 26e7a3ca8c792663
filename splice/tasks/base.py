"""What every task provides: problems, the three prompts (unaided, with tool, oracle) and grading.

A task turns one official data file into `Problem`s and each problem into chat messages plus tool
declarations. Messages are plain `{"role", "content"}` dicts and tools use the OpenAI function
format `{"type": "function", "function": {"name", "description", "parameters"}}`; the model
family (`nudgeability.models.families`) renders both in its native chat template, so no task
knows any family's markers. Tool calls are never executed during measurement, so a tool is only a
declaration.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from nudgeability.splice.tasks.problem import GradeRecord, Problem
from nudgeability.splice.tasks.scoring import labelled_answer
from nudgeability.splice.tasks.tools import Toolbox, ask_expert

Messages = list[dict]
Tools = list[dict]

# The oracle control's tool, the same for every task: a free, correct worked answer.
ASK_EXPERT_USE = "it returns a correct worked answer to a question, at no cost."
ASK_EXPERT_TOOL = (
    "ask_expert",
    "Ask an expert, who returns a correct worked answer to the question at no cost.",
    {"question": "The question to ask the expert."},
)

# The shipped samples (see splice/data/README.md for provenance and licences).
DATA_DIR = Path(__file__).resolve().parent.parent / "data"


class UnknownTaskError(ValueError):
    """A task name that is not registered."""


def function_tool(name: str, description: str, parameters: dict[str, str]) -> dict:
    """An OpenAI-format function declaration whose parameters are all required strings.

    `parameters` maps each argument name to its description.
    """
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {
                    arg: {"type": "string", "description": text} for arg, text in parameters.items()
                },
                "required": list(parameters),
            },
        },
    }


class Task(ABC):
    """A task: loads its official file, builds the prompts and grades answers.

    Subclasses set `name`, `tool_names`, `data_filename`, their prompt wording (`system_unaided`,
    `system_with_tool` with `{tool}` and `{tool_use}` slots, the scoped `tool` as
    `(name, description, parameters)` and its `tool_use` line) and implement `load`, `user_text`
    and `grade`. The oracle tool is always `ask_expert` (ASK_EXPERT_TOOL).
    """

    name: ClassVar[str]
    tool_names: ClassVar[tuple[str, ...]]
    oracle_tool_names: ClassVar[tuple[str, ...]] = (ASK_EXPERT_TOOL[0],)
    data_filename: ClassVar[str]
    system_unaided: ClassVar[str]
    system_with_tool: ClassVar[str]
    tool: ClassVar[tuple[str, str, dict[str, str]]]
    tool_use: ClassVar[str]
    # the label both answering prompts ask the final answer to start with (`holds_answer`)
    answer_opener: ClassVar[str] = "Answer:"

    def default_data_path(self) -> Path:
        """The shipped sample of this task (the embedded default of `nudge run`)."""
        return DATA_DIR / self.data_filename

    @abstractmethod
    def load(self, path: str | os.PathLike | None = None) -> list[Problem]:
        """Read the official data file (default: the shipped sample) into problems, in file order.

        Raises `DataFileError` (naming the file, line and field) for a malformed record and
        `EmptyDatasetError` when no problem is left; a missing file raises `FileNotFoundError`.
        """

    @abstractmethod
    def user_text(self, problem: Problem) -> str:
        """The user turn of every prompt: the question (and the task's context)."""

    def unaided_messages(self, problem: Problem) -> Messages:
        """System and user messages of the unaided prompt: no tool is mentioned or declared."""
        return [
            {"role": "system", "content": self.system_unaided},
            {"role": "user", "content": self.user_text(problem)},
        ]

    def with_tool(self, problem: Problem) -> tuple[Messages, Tools]:
        """The same user turn; the system turn offers the task's tool, declared as a function tool."""
        return self._tool_prompt(problem, self.tool, self.tool_use)

    def oracle(self, problem: Problem) -> tuple[Messages, Tools]:
        """The with-tool prompt with the tool swapped for `ask_expert`, a free correct worked answer."""
        return self._tool_prompt(problem, ASK_EXPERT_TOOL, ASK_EXPERT_USE)

    def _tool_prompt(
        self, problem: Problem, tool: tuple[str, str, dict[str, str]], tool_use: str
    ) -> tuple[Messages, Tools]:
        system = self.system_with_tool.format(tool=tool[0], tool_use=tool_use)
        return (
            [
                {"role": "system", "content": system},
                {"role": "user", "content": self.user_text(problem)},
            ],
            [function_tool(*tool)],
        )

    @abstractmethod
    def tool_function(self, data_path: str | os.PathLike | None = None, *, retrieve_k: int = 1):
        """The executable scoped tool, `f(problem, arguments) -> result text`, for the data file in
        use (default: the shipped sample); `retrieve_k` widens MuSiQue's `retrieve`."""

    def toolbox(self, data_path: str | os.PathLike | None = None, *, retrieve_k: int = 1):
        """The executable tools of the with-tool and oracle prompts (a `tools.Toolbox`): the
        scoped tool (`tool_function`) and `ask_expert`, each with the declaration its prompt shows.
        """
        return Toolbox(
            functions={
                self.tool[0]: self.tool_function(data_path, retrieve_k=retrieve_k),
                ASK_EXPERT_TOOL[0]: lambda problem, arguments: ask_expert(problem),
            },
            declarations={
                self.tool[0]: function_tool(*self.tool),
                ASK_EXPERT_TOOL[0]: function_tool(*ASK_EXPERT_TOOL),
            },
        )

    @abstractmethod
    def grade(self, problem: Problem, answer_text: str | None) -> GradeRecord:
        """Grade a committed answer; `correct` is None when the answer cannot be graded."""

    @abstractmethod
    def answer_key(self, answer_text: str | None) -> str | None:
        """The answer normalised as grading compares it, so that two answers agree exactly when
        their keys are equal (self-consistency); None when the answer cannot be read."""

    def holds_answer(self, text: str) -> bool:
        """Whether `text` holds an answer in this task's format: a labelled line (`Answer: …`)
        with a non-empty span. The families call it on the text beside a tool call, to tell an
        answer (OTHER, call_and_answer) from narration (TOOL); see splice/README.md."""
        return labelled_answer(text) is not None
