"""The run directory's layout: its file names and the record key.

Standard library only, so that every layer (the runner, the audit, `nudge merge` and the stats)
imports the names from here instead of spelling them again. What each file holds is described in
splice/rundir/README.md; its JSON-lines files are read by util/json_lines.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

MANIFEST = "manifest.json"
RECORDS = "records.jsonl"
RESOLUTIONS = "resolutions.jsonl"
TIMINGS = "timings.jsonl"
PARTS = "parts"
DAMAGED = "damaged"
SIGNALS_DIR = "signals"  # the side files stats reads beside the records (splice/run/signals.py)
LOCK = ".lock"
# the sha256 of each part written since the seal (all of them, in a run not yet sealed)
PART_HASHES = "part_hashes.jsonl"
PART_SUFFIX = ".jsonl"  # parts/<unit>.jsonl: a finished unit's records
SIDE_SUFFIX = ".npy"  # signals/<unit>.npy: a B unit's hidden states


def part_file(unit_name: str) -> str:
    """Where a run directory stores a finished unit's records (relative to the directory)."""
    return f"{PARTS}/{unit_name}{PART_SUFFIX}"


def side_file(unit_name: str) -> str:
    """Where a run directory stores a B unit's hidden states (relative to the directory)."""
    return f"{SIGNALS_DIR}/{unit_name}{SIDE_SUFFIX}"


class RecordKey(NamedTuple):
    """What names one record in a run: a problem under one condition with one sampling seed, and
    for the self-consistency samples (condition `consistency`) the sample's index.

    It prints as the plain tuple, without the sample when there is none: `('q1', 'B', 0)`.
    """

    problem_id: str
    condition: str
    seed: int
    sample: int | None = None  # only the self-consistency samples have one

    @classmethod
    def of(cls, record: Mapping) -> RecordKey:
        """The key of a record (or a resolution) read from a JSON line."""
        return cls(record["problem_id"], record["condition"], record["seed"], record.get("sample"))

    @property
    def compact(self) -> tuple:
        """The key as a plain tuple: three fields, four for a self-consistency sample (also the
        order keys sort in)."""
        return tuple(self) if self.sample is not None else tuple(self)[:3]

    def __str__(self) -> str:
        return repr(self.compact)
