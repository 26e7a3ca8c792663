"""Action codes: the int8 alphabet every estimator array is written in.

An experiment's actions are stored as int8 arrays so that estimators and the bootstrap kernels
work on plain numpy data. The codes are a stable public contract:

    SELF = 0    a final answer
    TOOL = 1    a well-formed call of the declared tool
    OTHER = 2   a completed but malformed commitment
    TRUNC = 3   no commitment within the token budget
    NONE = -1   no arm at all (B never closed its thinking, or the record is missing)

Competence labels `s` use 1 = unaided correct, 0 = wrong, -1 = unknown (`UNKNOWN`).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from nudgeability.models.families import action as kinds

# The kind strings are owned by the family parser (models/families/action.py); a kind's code is
# its index there, so a kind added there gets a code here.
KINDS = kinds.ACTION_KINDS
_CODE_OF_KIND = {kind: code for code, kind in enumerate(KINDS)}
SELF = _CODE_OF_KIND[kinds.SELF]
TOOL = _CODE_OF_KIND[kinds.TOOL]
OTHER = _CODE_OF_KIND[kinds.OTHER]
TRUNC = _CODE_OF_KIND[kinds.TRUNC]
NONE = -1

UNKNOWN = -1  # competence label s_i when NT is truncated or cannot be graded
_KIND_OF_CODE = {code: kind for kind, code in _CODE_OF_KIND.items()} | {NONE: "NONE"}


def action_code(kind: str | None) -> int:
    """The int8 code of an action kind string ("SELF", "TOOL", "OTHER", "TRUNC"); None -> NONE.

    Raises ValueError for any other string, naming the accepted kinds.
    """
    if kind is None:
        return NONE
    try:
        return _CODE_OF_KIND[kind]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown action kind {kind!r}: expected one of {', '.join(KINDS)}"
        ) from None


def action_kind(code: int) -> str:
    """The string name of an action code ("NONE" for -1); ValueError for an unknown code."""
    try:
        return _KIND_OF_CODE[int(code)]
    except KeyError:
        raise ValueError(f"unknown action code {code!r}: expected -1..3") from None


def codes_from_kinds(kinds: Iterable[str | None]) -> np.ndarray:
    """An int8 array of action codes from kind strings (None -> NONE)."""
    return np.array([action_code(kind) for kind in kinds], dtype=np.int8)


def competence_code(correct: bool | None) -> int:
    """s_i from a grade's `correct` field: True -> 1, False -> 0, None -> UNKNOWN (-1)."""
    if correct is None:
        return UNKNOWN
    return 1 if correct else 0


def completed(actions: np.ndarray) -> np.ndarray:
    """Mask of committed actions (SELF, TOOL or OTHER): neither TRUNC nor missing."""
    return (actions == SELF) | (actions == TOOL) | (actions == OTHER)


def decisive(actions: np.ndarray) -> np.ndarray:
    """Mask of SELF or TOOL actions: the only ones that take part in flips."""
    return (actions == SELF) | (actions == TOOL)
