"""Sensitivity S: how far doubt moves delegation relative to confidence, in percentage points.

Definition (stats/README.md, "Sensitivity S"):

    I_S = problems with both a completed + arm and a completed - arm (SELF, TOOL or OTHER;
          TRUNC and missing arms are dropped)
    S   = 100 * ( mean_{I_S} 1[A_- = TOOL] - mean_{I_S} 1[A_+ = TOOL] )

OTHER counts as not-TOOL. S > 0 means doubt pushes towards the tool relative to confidence.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..actions import TOOL, completed
from ..validation import same_shape


@dataclass(frozen=True)
class Sensitivity:
    """S in pp with its retained count n_S and the TOOL counts under each polarity on I_S."""

    S: float
    n_S: int
    tool_plus: int
    tool_minus: int


def sensitivity_indicators(
    conf: np.ndarray, doubt: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-problem booleans (in I_S, A_- = TOOL within I_S, A_+ = TOOL within I_S)."""
    conf, doubt = same_shape(conf=conf, doubt=doubt)
    in_s = completed(conf) & completed(doubt)
    return in_s, in_s & (doubt == TOOL), in_s & (conf == TOOL)


def swing(tool_minus, tool_plus, n_s):
    """S = 100 * (tool_minus / n_S - tool_plus / n_S); NaN where n_S = 0. Works on arrays too.

    This exact float expression (two means, then the difference) is the one the bootstrap kernel
    and the tests use, so that every path gives bit-identical values.
    """
    tool_minus, tool_plus, n_s = (
        np.asarray(x, dtype=np.float64) for x in (tool_minus, tool_plus, n_s)
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        value = 100.0 * (tool_minus / n_s - tool_plus / n_s)
    return np.where(n_s > 0, value, np.nan)[()]


def sensitivity(conf: np.ndarray, doubt: np.ndarray) -> Sensitivity:
    """S over the problems with both arms completed (see module docstring).

    Example: conf = [SELF, SELF, TOOL], doubt = [TOOL, SELF, TOOL] gives n_S = 3,
    S = 100 * (2/3 - 1/3) = 33.33 pp.
    """
    in_s, minus, plus = sensitivity_indicators(conf, doubt)
    n_s, t_minus, t_plus = int(in_s.sum()), int(minus.sum()), int(plus.sum())
    return Sensitivity(
        S=float(swing(t_minus, t_plus, n_s)), n_S=n_s, tool_plus=t_plus, tool_minus=t_minus
    )
