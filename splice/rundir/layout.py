"""The run directory's layout: its file names.

Standard library only, so that every layer (the runner, the audit, `nudge merge` and the stats)
imports the names from here instead of spelling them again. What each file holds is described in
splice/rundir/README.md; its JSON-lines files are read by util/json_lines.py.
"""

from __future__ import annotations

MANIFEST = "manifest.json"
RECORDS = "records.jsonl"
RESOLUTIONS = "resolutions.jsonl"
TIMINGS = "timings.jsonl"
PARTS = "parts"
DAMAGED = "damaged"
SIGNALS_DIR = (
    "signals"  # the side files stats reads beside the records (splice/run/units/signals.py)
)
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
