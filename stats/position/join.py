"""The join of one experiment's records into one table per position bin (bins.py), and the
paper's cut.

A run made with `nudge run --cuts` forks its arms at extra cuts of a base's reasoning as well as
at the paper's cut: an arm record at an extra cut carries `at`, the cut's index in its base's
generated ids (splice/rundir/records.py); its base (B, or oracle_B for the oracle arms: the arm
condition's parent) carries `boundary`, the index of its think-close. Rules:

- an arm at an extra cut has the relative position at / boundary of its base record (the same
  problem and seed); an arm whose base record is missing or has no boundary cannot be placed and
  is counted (`unplaced`), never guessed; a cut at or after its base's think-close is a
  RecordsError naming the record;
- a (problem, seed, base)'s candidate cuts are the `at` values of its arm records; each bin keeps
  at most one of them (bins.choose_cut: the closest to the bin's centre, the earlier on a tie),
  and every arm of that base in that bin is the arm at the kept cut (-1 where that condition has
  no record there);
- a bin's rows are the (problem, seed) pairs with an arm at a kept cut in the bin, in the order of
  the experiment's own table (records/join.py), the rows of one problem sharing a cluster;
- s (the competence label) comes from NT and the base action from B, as in the experiment's own
  table: the arms at every cut share B's action, the one B took when it went on from there; the
  oracle pair's base is oracle_B's action, an arm column as in the experiment's own table;
- the paper's cut (relative position 1) is the experiment's own table (`table_from_records`), so
  its estimates are the experiment's own (Table 1's S, WT, WTrand, L and intervals);
- bins without a row are left out; the self-consistency samples are no arms.

Each table also carries the relative position of each row's kept cut per base, and per arm the
splice's log-probability (`Likelihoods.splice_logprob`, `nudge run --likelihoods`), NaN where the
record has none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from nudgeability.splice.experiment.conditions import (
    NO_TOOL_BASE,
    SHIPPED_CONDITIONS,
    TOOL_BASE,
    ConditionSet,
)
from nudgeability.splice.rundir.records import Record, RecordKey

from ..actions import NONE, action_code
from ..records.join import Rows, competence_label, parent_of, table_from_records
from ..records.run_dirs import RecordsError
from ..table import ExperimentLabel, ExperimentTable
from .bins import DEFAULT_BINS, PositionBin, choose_cut, paper_point, position_bins


@dataclass(frozen=True, eq=False)
class PositionTable:
    """One position bin (or the paper's cut) of one experiment.

    table: the rows with an arm at the bin (module docstring) as an ExperimentTable;
    position: base code -> each row's kept cut's relative position (NaN where the row has none);
    splice_logprob: arm code -> each row's splice log-probability at the kept cut (NaN where
        the record carries no likelihoods, or there is no record)."""

    bin: PositionBin
    table: ExperimentTable
    position: Mapping[str, np.ndarray] = field(default_factory=dict)
    splice_logprob: Mapping[str, np.ndarray] = field(default_factory=dict)

    @property
    def mean_position(self) -> float:
        """The mean relative position of the kept cuts (every base's); 1.0 at the paper's cut."""
        values = [p[np.isfinite(p)] for p in self.position.values()]
        found = np.concatenate(values) if values else np.zeros(0)
        return float(found.mean()) if found.size else float("nan")


@dataclass(frozen=True, eq=False)
class PositionTables:
    """Every position table of one experiment, bins ascending then the paper's cut, and how many
    arm records at extra cuts could not be placed (no base record with a boundary)."""

    label: ExperimentLabel
    bins: int
    tables: tuple[PositionTable, ...]
    unplaced: int = 0


def _logprob(record: Record | None) -> float:
    if record is None or record.likelihoods is None:
        return float("nan")
    return float(record.likelihoods.splice_logprob)


def position_tables(
    records: Sequence[Record],
    label: ExperimentLabel,
    conditions: Sequence[str] = (),
    bins: int = DEFAULT_BINS,
    known: ConditionSet = SHIPPED_CONDITIONS,
) -> PositionTables:
    """The tables of one experiment's records per position bin and at the paper's cut (module
    docstring); `conditions` and `known` as for `table_from_records`."""
    kept = [r for r in records if r.sample is None]
    rows = Rows.of((r.problem_id, r.seed) for r in kept if r.at is None)  # the own table's
    bases: dict[tuple[str, int, str], Record] = {}
    at_cut: dict[tuple[str, int, str, int], Record] = {}
    paper_arms: dict[tuple[str, int, str], Record] = {}
    competence: dict[tuple[str, int], int] = {}
    for r in kept:
        key = (r.problem_id, int(r.seed))
        if r.at is not None:
            at_cut[(*key, r.condition, int(r.at))] = r
        elif r.condition == NO_TOOL_BASE:
            competence[key] = competence_label(r)
        elif parent_of(r.condition, known) is None:
            bases[(*key, r.condition)] = r
        else:
            paper_arms[(*key, r.condition)] = r

    # (problem, seed, base) -> (the base's boundary, its arms' cuts); arms that cannot be placed
    cuts: dict[tuple[str, int, str], tuple[int, set[int]]] = {}
    unplaced = 0
    for problem_id, seed, condition, at in at_cut:
        parent = parent_of(condition, known) or TOOL_BASE
        base = bases.get((problem_id, seed, parent))
        if base is None or base.boundary is None:
            unplaced += 1
            continue
        if not 0 <= at < base.boundary:
            raise RecordsError(
                f"record {RecordKey(problem_id, condition, seed, None, at)}: its cut lies at or "
                f"after its base's think-close ({parent} boundary {base.boundary})"
            )
        cuts.setdefault((problem_id, seed, parent), (base.boundary, set()))[1].add(at)
    arm_codes = sorted({c for _, _, c, _ in at_cut})
    base_arms = sorted(
        {parent_of(c, known) or TOOL_BASE for c in arm_codes} - {TOOL_BASE}
    )  # oracle_B: the oracle pair's base, an arm column as in the experiment's own table

    tables = []
    for position_bin in position_bins(bins)[:-1]:
        chosen = {
            key: at
            for key, (boundary, found) in cuts.items()
            if (at := choose_cut(found, boundary, position_bin.index, bins)) is not None
        }
        members = [
            i
            for i, (p, s) in enumerate(rows.keys)
            if any((p, s, b) in chosen for b in (TOOL_BASE, *base_arms))
        ]
        if not members:
            continue
        n = len(members)
        keys = [rows.keys[i] for i in members]
        arms = {c: np.full(n, NONE, np.int8) for c in (*arm_codes, *base_arms)}
        logprob = {c: np.full(n, np.nan) for c in arm_codes}
        position = {b: np.full(n, np.nan) for b in (TOOL_BASE, *base_arms)}
        base = np.full(n, NONE, np.int8)
        for j, (problem_id, seed) in enumerate(keys):
            if (problem_id, seed, TOOL_BASE) in bases:
                base[j] = action_code(bases[(problem_id, seed, TOOL_BASE)].action.kind)
            for b in base_arms:
                if (problem_id, seed, b) in bases:
                    arms[b][j] = action_code(bases[(problem_id, seed, b)].action.kind)
            for b in position:
                at = chosen.get((problem_id, seed, b))
                if at is not None:
                    position[b][j] = at / cuts[(problem_id, seed, b)][0]
            for c in arm_codes:
                at = chosen.get((problem_id, seed, parent_of(c, known) or TOOL_BASE))
                record = None if at is None else at_cut.get((problem_id, seed, c, at))
                if record is not None:
                    arms[c][j] = action_code(record.action.kind)
                    logprob[c][j] = _logprob(record)
        table = ExperimentTable(
            s=np.array([competence.get(k, -1) for k in keys], np.int8),
            base=base,
            arms=arms,
            cluster=rows.cluster[members],
            seed=np.array([s for _, s in keys], dtype=np.int64),
            problem_ids=tuple(p for p, _ in keys),
            label=label,
            known=known,
        )
        tables.append(PositionTable(position_bin, table, position, logprob))

    tables.append(_paper_table(records, label, conditions, bases, paper_arms, bins, known))
    return PositionTables(label, int(bins), tuple(tables), unplaced)


def _paper_table(records, label, conditions, bases, paper_arms, bins, known) -> PositionTable:
    """The experiment's own table at the paper's cut, with the splice log-probabilities of its
    arms; the relative position is 1 where the base closed its thinking."""
    table = table_from_records(records, label, conditions, known)
    keys = list(zip(table.problem_ids, table.seed.tolist()))
    position = {}
    for b in sorted(
        {parent_of(c, known) or TOOL_BASE for c in table.arms if parent_of(c, known) is not None}
    ):
        closed = [(p, s, b) in bases and bases[(p, s, b)].boundary is not None for p, s in keys]
        position[b] = np.where(closed, 1.0, np.nan)
    logprob = {
        c: np.array([_logprob(paper_arms.get((p, s, c))) for p, s in keys])
        for c in table.arms
        if parent_of(c, known) is not None
    }
    return PositionTable(paper_point(bins), table, position, logprob)
