"""The per-experiment table: one row per (problem, seed), int8 arrays keyed by condition code.

An experiment (model x task x decoding config) is reduced to arrays before any statistic runs:

- `s`: competence label, 1 = unaided (NT) correct, 0 = wrong, -1 = unknown;
- `base`: the with-tool base action A_B (condition `B`), as an action code (see `actions.py`);
- `arms`: one action array per other condition code (`conf`, `doubt`, `empty`, `neutral`, the
  voices, `sealed_*`, `oracle_B`, `oracle_*`); -1 where the problem has no arm;
- `correct`: for graded self-answers, keyed by condition (`B`, `oracle_B`): 1 right, 0 wrong,
  -1 not graded (not SELF, or ungradeable);
- `cluster`: the problem index of each row. Greedy runs have one row per problem; sampled runs
  have one row per (problem, seed), and the rows of one problem share a cluster, which the
  clustered bootstrap resamples together;
- `known`: the conditions its runs know (splice/experiment/conditions.py `ConditionSet`: the
  shipped ones and the runs' own), where every statistic looks a pair or the report order up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from nudgeability.splice.experiment.conditions import SHIPPED_CONDITIONS, TOOL_BASE, ConditionSet


class TableError(ValueError):
    """An experiment table whose arrays are malformed (the message names the field)."""


@dataclass(frozen=True)
class ExperimentLabel:
    """What identifies an experiment: model x task x decoding config."""

    model: str = "model"
    task: str = "task"
    decoding: str = "greedy"
    # how the runs were continued (token / text / chat, see nudgeability.backends): runs at
    # different levels are different experiments, never joined
    continuation: str = "token"
    # open-weight (the local engine, or a server the user runs) or provider-served, read from the
    # manifest (records/cohorts.py); not part of the key: it describes the model, never splits it
    cohort: str = "open-weight"

    @property
    def key(self) -> tuple[str, ...]:
        """(model, task, decoding), plus the continuation level when it is not token-exact."""
        level = () if self.continuation == "token" else (self.continuation,)
        return (self.model, self.task, self.decoding, *level)


def _int8_array(name: str, values, allowed: tuple[int, int]) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise TableError(f"field {name}: expected a 1-D array, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise TableError(f"field {name}: expected integer codes, got dtype {array.dtype}")
    lo, hi = allowed
    if array.size and (array.min() < lo or array.max() > hi):
        bad = array[(array < lo) | (array > hi)][0]
        raise TableError(f"field {name}: value {bad} outside the allowed codes {lo}..{hi}")
    return array.astype(np.int8)


@dataclass(frozen=True, eq=False)
class ExperimentTable:
    """One experiment as int8 arrays of equal length (one entry per row); validated on creation.

    Raises TableError (a ValueError) naming the field when an array has the wrong length, shape,
    dtype or an out-of-range code.
    """

    s: np.ndarray
    base: np.ndarray
    arms: Mapping[str, np.ndarray] = field(default_factory=dict)
    correct: Mapping[str, np.ndarray] = field(default_factory=dict)
    cluster: np.ndarray | None = None
    seed: np.ndarray | None = None
    problem_ids: tuple[str, ...] | None = None
    label: ExperimentLabel = field(default_factory=ExperimentLabel)
    known: ConditionSet = SHIPPED_CONDITIONS

    def __post_init__(self) -> None:
        s = _int8_array("s", self.s, (-1, 1))
        n = len(s)
        base = _int8_array("base", self.base, (-1, 3))
        checked = {"base": base}
        arms = {code: _int8_array(f"arms[{code!r}]", a, (-1, 3)) for code, a in self.arms.items()}
        correct = {
            code: _int8_array(f"correct[{code!r}]", c, (-1, 1)) for code, c in self.correct.items()
        }
        checked |= {f"arms[{c!r}]": a for c, a in arms.items()} | {
            f"correct[{c!r}]": a for c, a in correct.items()
        }
        if TOOL_BASE in arms:
            raise TableError("field arms['B']: the with-tool base goes in `base`, not in `arms`")
        cluster = np.arange(n, dtype=np.int64) if self.cluster is None else np.asarray(self.cluster)
        seed = np.zeros(n, dtype=np.int64) if self.seed is None else np.asarray(self.seed)
        checked |= {"cluster": cluster, "seed": seed}
        for name, array in checked.items():
            if np.ndim(array) != 1 or len(array) != n:
                raise TableError(
                    f"field {name}: length {np.shape(array)} does not match len(s) = {n}"
                )
        if n and not (np.issubdtype(cluster.dtype, np.integer) and cluster.min() >= 0):
            raise TableError("field cluster: expected non-negative integer problem indices")
        if self.problem_ids is not None and len(self.problem_ids) != n:
            raise TableError(
                f"field problem_ids: length {len(self.problem_ids)} does not match len(s) = {n}"
            )
        if self.problem_ids is not None:
            object.__setattr__(self, "problem_ids", tuple(str(p) for p in self.problem_ids))
        object.__setattr__(self, "s", s)
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "arms", arms)
        object.__setattr__(self, "correct", correct)
        object.__setattr__(self, "cluster", cluster.astype(np.int64))
        object.__setattr__(self, "seed", seed.astype(np.int64))

    def __len__(self) -> int:
        return len(self.s)

    def actions(self, condition: str) -> np.ndarray | None:
        """The action array of a condition code ('B' is the base); None when absent."""
        return self.base if condition == TOOL_BASE else self.arms.get(condition)

    def has_pair(self, pair: str) -> bool:
        """Whether both arms and the base of a named pair (`known.pairs`) are present."""
        plus, minus, base = self.known.pairs[pair]
        return all(self.actions(code) is not None for code in (plus, minus, base))

    @property
    def n_problems(self) -> int:
        """Distinct problems (clusters); equals len(self) for a single-seed table."""
        return int(np.unique(self.cluster).size)

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(int(x) for x in np.unique(self.seed))

    @property
    def is_clustered(self) -> bool:
        """True when some problem has more than one row (several decoding seeds)."""
        return self.n_problems < len(self)

    def select(self, rows: np.ndarray) -> ExperimentTable:
        """The sub-table of the given row indices or boolean mask (labels and keys kept)."""
        rows = (
            np.flatnonzero(rows)
            if np.asarray(rows).dtype == bool
            else np.asarray(rows, dtype=np.int64)
        )
        ids = None if self.problem_ids is None else tuple(self.problem_ids[i] for i in rows)
        return ExperimentTable(
            s=self.s[rows],
            base=self.base[rows],
            arms={c: a[rows] for c, a in self.arms.items()},
            correct={c: a[rows] for c, a in self.correct.items()},
            cluster=self.cluster[rows],
            seed=self.seed[rows],
            problem_ids=ids,
            label=self.label,
            known=self.known,
        )

    def for_seed(self, seed: int) -> ExperimentTable:
        """The rows of one decoding seed: a paired sample of its own."""
        return self.select(self.seed == seed)
