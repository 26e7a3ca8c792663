"""Storing a computed unit, reading a stored one back and checking it, for both schedules
(runner.py, stream.py).

A unit's side file (B's hidden states), its part and its timing line are written together, in
that order (`store_unit`), so a stored part has its states; a stored part is read back as typed
records (`stored_records`), the one reader of parts the units build on; it is reused only when
`reusable` finds it whole and holding exactly its unit's keys (rundir/part_check.py), and a
damaged one is set aside, named in one warning line, so that its unit is computed again.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
import torch

from nudgeability.splice.run.units import UnitCounts
from nudgeability.splice.run.units.signals import write_hidden
from nudgeability.splice.rundir.assemble import tool_keys
from nudgeability.splice.rundir.layout import side_file
from nudgeability.splice.rundir.part_check import base_records
from nudgeability.splice.rundir.plan import RESOLVE_PHASE, Plan, Unit
from nudgeability.splice.rundir.records import Record, ResolutionRecord
from nudgeability.splice.rundir.store import WorkStore


def reusable(plan: Plan, store: WorkStore, unit: Unit) -> bool:
    """Whether a stored part can be reused (its inputs stored and checked before it); a damaged
    one is set aside, named in one line."""
    if unit.phase == RESOLVE_PHASE:  # one resolution per TOOL record of the chunk's parts
        expected = tool_keys(plan, store.read_part, unit.seed, unit.chunk)
    else:  # an arms unit's bases were checked (or recomputed) before it
        expected = plan.expected_keys(unit, base_records(plan, unit, store.part_path))
    problem = store.part_problem(unit, expected)
    if problem is None:
        return True
    moved = store.set_aside(unit)
    print(
        f"nudge run: warning: {store.part_path(unit)}: damaged part ({problem}); moved to "
        f"{moved}, recomputing its unit",
        file=sys.stderr,
    )
    return False


def stored_records(store: WorkStore, unit: Unit) -> list[Record]:
    """The records of a stored base or arms part, in their stored order."""
    return [Record.from_json(line) for line in store.read_part(unit)]


def store_unit(
    store: WorkStore,
    plan: Plan,
    unit: Unit,
    records: Sequence[Record | ResolutionRecord],
    counts: UnitCounts,
    hidden: np.ndarray | None = None,
) -> None:
    """Write a computed unit: its side file of hidden states (`hidden`, B with --signals:
    units/signals.py), its part, then its line in timings.jsonl (`counts.seconds` is set).

    Parts built on this unit's former records (its dependents) are set aside by the store before
    the new part lands, each named in one warning line, so they are computed again."""
    if hidden is not None:
        write_hidden(store.root / side_file(unit.name), hidden)
    lines = [record.to_json() for record in records]
    for dependent, moved in store.write_part(unit, lines, plan.dependents_of(unit)):
        print(
            f"nudge run: warning: {store.part_path(dependent)}: built on {unit.name}, whose "
            f"records came out other than before; moved to {moved}, recomputing its unit",
            file=sys.stderr,
        )
    seconds = counts.seconds
    store.append_timing(
        {
            "unit": unit.name,
            "phase": unit.phase,
            "seed": unit.seed,
            "chunk": unit.chunk,
            "problems": len(plan.chunks[unit.chunk]),
            "sequences": counts.sequences,
            "prefill_tokens": counts.prefill_tokens,
            "shared_prefill_tokens": counts.shared_prefill_tokens,
            "generated_tokens": counts.generated_tokens,
            "cached_prompt_tokens": counts.cached_prompt_tokens,
            "retries": counts.retries,
            "seconds": round(seconds, 4),
            "generated_tokens_per_s": round(counts.generated_tokens / max(seconds, 1e-9), 2),
            "threads": torch.get_num_threads(),
        }
    )
