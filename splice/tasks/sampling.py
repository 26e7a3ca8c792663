"""Drawing n problems with a fixed seed.

The order is a seeded permutation: each problem is ranked by `sha256(f"{seed}:{id}")` and the
first n are taken. So the same (problems, seed, n) always gives the same problems in the same
order, a larger n extends a smaller n's list, and the draw depends only on the ids (not on the
file's order, nor on Python's or numpy's random generators, which could change between versions).
Asking for more problems than there are is an error, never a silent cap.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

from nudgeability.splice.tasks.problem import Problem


class SampleSizeError(ValueError):
    """`n` cannot be drawn from the loaded problems."""


def _rank(seed: int, problem_id: str) -> bytes:
    return hashlib.sha256(f"{seed}:{problem_id}".encode()).digest()


def sample_problems(
    problems: Sequence[Problem],
    n: int | None,
    seed: int,
    *,
    source: str | os.PathLike | None = None,
) -> list[Problem]:
    """The first `n` problems of the seed's permutation (all of them, permuted, when n is None).

    `source` (the data file) only goes into error messages. Raises `SampleSizeError` when n < 1 or
    n exceeds the number of problems, and `ValueError` when two problems share an id.
    """
    where = f"{source}: " if source is not None else ""
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise SampleSizeError(f"{where}n={n!r} is not a positive whole number; pass n >= 1")
    if n is not None and n > len(problems):
        raise SampleSizeError(
            f"{where}n={n} asks for more problems than the {len(problems)} available (after "
            f"filtering); pass n <= {len(problems)} or a larger data file"
        )
    ids = [problem.id for problem in problems]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{where}problem ids are not unique; sampling needs unique ids")
    ordered = sorted(problems, key=lambda problem: _rank(seed, problem.id))
    return ordered if n is None else ordered[:n]
