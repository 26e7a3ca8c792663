"""Every delegation-value estimate of one experiment, with its problem-level bootstrap interval.

    table = ValueTable(s, actions={"NT": ..., "B": ..., "conf": ...}, final={...}, ...)
    summary = summarize_value(table, n_boot=20000, seed=0)

Each row (problem, seed) reduces to one row of integer counts: for every condition its retained
and right rows, for every (+, -) pair its I_V counts and its flip strata, for every tool its
resolutions and right answers. The rows of one problem are summed (a cluster), the clusters are
resampled with replacement (kernels.bootstrap_sums, the same draws as the S/WT bootstrap), and
every statistic is recomputed from the resampled sums by the formulas of delegation_value.py.
Intervals are 95% percentile intervals; a replicate in which a statistic is undefined (no
retained row, no flip) is left out of that statistic's interval.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from nudgeability.splice.experiment.conditions import PAIRS, REPORT_ORDER

from . import kernels
from .action_table import ExperimentLabel, TableError
from .bootstrap import percentile_interval
from .contributions import aggregate_by_cluster, compress
from .delegation_value import (
    FLIP_QUANTITIES,
    FinalAccuracy,
    FlipValue,
    ToolAccuracy,
    ValueSwing,
    accuracy_from_counts,
    accuracy_indicators,
    final_accuracy,
    flip_indicators,
    flip_value,
    flip_value_from_counts,
    share_from_counts,
    swing_indicators,
    tool_accuracy,
    value_swing,
)
from .sensitivity import swing
from .targeting import STRATA


@dataclass(frozen=True, eq=False)
class ValueTable:
    """One experiment's actions and final outcomes, one entry per row (problem, seed).

    actions: condition code -> action codes (actions.py), "NT" and "B" included;
    final: condition code -> final outcomes (delegation_value.final_outcome);
    tool_resolved / tool_right: tool name -> per-row count of resolved calls / right answers;
    cluster: the problem index of each row (rows of one problem are resampled together).
    """

    s: np.ndarray
    actions: Mapping[str, np.ndarray]
    final: Mapping[str, np.ndarray]
    tool_resolved: Mapping[str, np.ndarray] = field(default_factory=dict)
    tool_right: Mapping[str, np.ndarray] = field(default_factory=dict)
    cluster: np.ndarray | None = None
    label: ExperimentLabel = field(default_factory=ExperimentLabel)

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
        order = {code: k for k, code in enumerate(REPORT_ORDER)}
        return sorted(present, key=lambda c: (order.get(c, len(order)), c))

    def pairs(self) -> list[str]:
        """The named (+, -) pairs (table.PAIRS) whose arms and base are all present."""
        have = set(self.conditions())
        return [name for name, codes in PAIRS.items() if set(codes) <= have]


@dataclass(frozen=True)
class DelegationValueSummary:
    """Delegation value of one experiment: every estimate carries its 95% interval (`ci`)."""

    model: str
    task: str
    decoding: str
    n_problems: int
    n_rows: int
    n_boot: int
    boot_seed: int
    accuracy: dict[str, FinalAccuracy]
    swing: dict[str, ValueSwing]
    flips: dict[str, FlipValue]
    tools: dict[str, ToolAccuracy]


@dataclass
class _Columns:
    """Where each estimator's counts sit in a contribution row."""

    accuracy: dict[str, tuple[int, int]] = field(default_factory=dict)  # (right, retained)
    swing: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # (n, minus, plus)
    flips: dict[str, np.ndarray] = field(default_factory=dict)  # (4, 6) column indices
    tools: dict[str, tuple[int, int]] = field(default_factory=dict)  # (right, resolved)
    blocks: list[np.ndarray] = field(default_factory=list)

    def add(self, *arrays) -> tuple[int, ...]:
        start = sum(len(b) for b in self.blocks)
        self.blocks.extend(np.asarray(a, dtype=np.int64)[None, :] for a in arrays)
        return tuple(range(start, start + len(arrays)))

    def matrix(self, n: int) -> np.ndarray:
        if not self.blocks:
            return np.zeros((n, 0), dtype=np.int64)
        return np.ascontiguousarray(np.concatenate(self.blocks, axis=0).T)


def value_contributions(table: ValueTable) -> tuple[np.ndarray, _Columns]:
    """The (rows, C) int64 count matrix of every estimator, and where each one's columns are."""
    cols = _Columns()
    for c in table.conditions():
        retained, right = accuracy_indicators(table.final[c])
        cols.accuracy[c] = cols.add(right, retained)
    for pair in table.pairs():
        plus, minus, base = PAIRS[pair]
        both, right_minus, right_plus = swing_indicators(table.final[plus], table.final[minus])
        cols.swing[pair] = cols.add(both, right_minus, right_plus)
        index = np.zeros((len(STRATA), len(FLIP_QUANTITIES)), dtype=np.int64)
        for j, (polarity, b) in enumerate(STRATA):
            arm = plus if polarity == "+" else minus
            found = flip_indicators(
                table.s,
                table.actions[base],
                table.actions[arm],
                table.final[base],
                table.final[arm],
                b,
            )
            index[j] = cols.add(*(found[q] for q in FLIP_QUANTITIES))
        cols.flips[pair] = index
    for tool in sorted(table.tool_resolved):
        cols.tools[tool] = cols.add(table.tool_right[tool], table.tool_resolved[tool])
    return cols.matrix(len(table)), cols


def resampled_sums(units: np.ndarray, n_boot: int, seed: int, engine: str = "numba") -> np.ndarray:
    """(n_boot, C) column sums of resampled units (numba kernel or its numpy twin)."""
    if engine not in ("numba", "numpy"):
        raise ValueError(f"engine must be 'numba' or 'numpy', got {engine!r}")
    if int(n_boot) < 1:
        raise ValueError(f"n_boot must be a positive number of replicates, got {n_boot}")
    types, unit_type = compress(units)
    if len(units) == 0:
        return np.zeros((int(n_boot), units.shape[1]), dtype=np.int64)
    run = kernels.bootstrap_sums if engine == "numba" else kernels.bootstrap_sums_twin
    return run(types, unit_type, int(n_boot), kernels.seed_key(seed))


def summarize_value(
    table: ValueTable, n_boot: int = 20000, seed: int = 0, *, engine: str = "numba"
) -> DelegationValueSummary:
    """Point estimates (delegation_value.py) of `table`, each with its 95% percentile interval."""
    contrib, cols = value_contributions(table)
    units = aggregate_by_cluster(contrib, table.cluster)
    sums = resampled_sums(units, n_boot, seed, engine)
    accuracy = {
        c: dataclasses.replace(
            final_accuracy(table.final[c]),
            ci=percentile_interval(accuracy_from_counts(sums[:, right], sums[:, kept])),
        )
        for c, (right, kept) in cols.accuracy.items()
    }
    swings, flips = {}, {}
    for pair in table.pairs():
        plus, minus, base = PAIRS[pair]
        n, right_minus, right_plus = cols.swing[pair]
        swings[pair] = dataclasses.replace(
            value_swing(table.final[plus], table.final[minus]),
            ci=percentile_interval(swing(sums[:, right_minus], sums[:, right_plus], sums[:, n])),
        )
        point = flip_value(
            table.s,
            table.actions[base],
            table.actions[plus],
            table.actions[minus],
            table.final[base],
            table.final[plus],
            table.final[minus],
        )
        replicates = flip_value_from_counts(sums[:, cols.flips[pair]])
        names = ("helpful_ci", "harmful_ci", "helpful_rand_ci", "harmful_rand_ci")
        flips[pair] = dataclasses.replace(
            point, **{name: percentile_interval(r) for name, r in zip(names, replicates)}
        )
    tools = {
        tool: dataclasses.replace(
            tool_accuracy(table.tool_resolved[tool], table.tool_right[tool]),
            ci=percentile_interval(share_from_counts(sums[:, right], sums[:, resolved])),
        )
        for tool, (right, resolved) in cols.tools.items()
    }
    return DelegationValueSummary(
        model=table.label.model,
        task=table.label.task,
        decoding=table.label.decoding,
        n_problems=int(np.unique(table.cluster).size),
        n_rows=len(table),
        n_boot=int(n_boot),
        boot_seed=int(seed),
        accuracy=accuracy,
        swing=swings,
        flips=flips,
        tools=tools,
    )
