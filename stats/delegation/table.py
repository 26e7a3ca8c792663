"""The delegation-value table: one experiment's actions and final outcomes as arrays.

The delegation join (join.py) builds it from a run's records and resolutions; the estimators
(value.py) and their intervals (summary.py) read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from nudgeability.splice.experiment.conditions import SHIPPED_CONDITIONS, ConditionSet

from ..table import ExperimentLabel, TableError


@dataclass(frozen=True, eq=False)
class ValueTable:
    """One experiment's actions and final outcomes, one entry per row (problem, seed).

    actions: condition code -> action codes (actions.py), "NT" and "B" included;
    final: condition code -> final outcomes (delegation_value.final_outcome);
    tool_resolved / tool_right: tool name -> per-row count of resolved calls / right answers;
    cluster: the problem index of each row (rows of one problem are resampled together);
    known: the conditions its runs know (their pairs and report order).
    """

    s: np.ndarray
    actions: Mapping[str, np.ndarray]
    final: Mapping[str, np.ndarray]
    tool_resolved: Mapping[str, np.ndarray] = field(default_factory=dict)
    tool_right: Mapping[str, np.ndarray] = field(default_factory=dict)
    cluster: np.ndarray | None = None
    label: ExperimentLabel = field(default_factory=ExperimentLabel)
    known: ConditionSet = SHIPPED_CONDITIONS

    def __post_init__(self) -> None:
        n = len(self.s)
        named = {"s": self.s}
        named |= {f"actions[{c!r}]": a for c, a in self.actions.items()}
        named |= {f"final[{c!r}]": a for c, a in self.final.items()}
        named |= {f"tool_resolved[{t!r}]": a for t, a in self.tool_resolved.items()}
        named |= {f"tool_right[{t!r}]": a for t, a in self.tool_right.items()}
        if self.cluster is not None:
            named["cluster"] = self.cluster
        for name, array in named.items():
            if np.ndim(array) != 1 or len(array) != n:
                raise TableError(
                    f"field {name}: length {np.shape(array)} does not match len(s) = {n}"
                )
        for kind, arrays, low, high in (
            ("actions", self.actions, -1, 3),
            ("final", self.final, -1, 1),
        ):
            for code, array in arrays.items():
                array = np.asarray(array)
                if array.size and (array.min() < low or array.max() > high):
                    raise TableError(f"field {kind}[{code!r}]: codes must lie in {low}..{high}")
        if set(self.tool_resolved) != set(self.tool_right):
            raise TableError("fields tool_resolved and tool_right must name the same tools")
        if self.cluster is None:
            object.__setattr__(self, "cluster", np.arange(n, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.s)

    def conditions(self) -> list[str]:
        """Conditions with both actions and outcomes, in report order (unknown codes last)."""
        present = [c for c in self.actions if c in self.final]
        order = {code: k for k, code in enumerate(self.known.report_order)}
        return sorted(present, key=lambda c: (order.get(c, len(order)), c))

    def pairs(self) -> list[str]:
        """The named (+, -) pairs (`known.pairs`) whose arms and base are all present."""
        have = set(self.conditions())
        return [name for name, codes in self.known.pairs.items() if set(codes) <= have]
