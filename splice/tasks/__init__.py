"""The tasks: each turns an official data file into problems, prompts and grades."""

from __future__ import annotations

from nudgeability.splice.tasks.base import Task, UnknownTaskError
from nudgeability.splice.tasks.musique import MusiqueTask
from nudgeability.splice.tasks.problem import DataFileError, EmptyDatasetError, Problem
from nudgeability.splice.tasks.sampling import SampleSizeError, sample_problems
from nudgeability.splice.tasks.strategyqa import StrategyQATask

_TASKS = (MusiqueTask, StrategyQATask)
TASK_NAMES = tuple(task.name for task in _TASKS)


def get_task(name: str) -> Task:
    """A new task object with its default options (MuSiQue keeps two-hop ids only).

    Raises `UnknownTaskError` (a ValueError) naming the task and listing the known ones.
    """
    for task in _TASKS:
        if task.name == name:
            return task()
    raise UnknownTaskError(f"unknown task '{name}'; known tasks: {', '.join(TASK_NAMES)}")


__all__ = [
    "DataFileError",
    "EmptyDatasetError",
    "MusiqueTask",
    "Problem",
    "SampleSizeError",
    "StrategyQATask",
    "TASK_NAMES",
    "Task",
    "UnknownTaskError",
    "get_task",
    "sample_problems",
]
