"""Where the project keeps what it computes once per machine: $NUDGE_CACHE, else
$XDG_CACHE_HOME/nudgeability, else ~/.cache/nudgeability.

Three users: the SmolLM2 conversion (models/smollm2.py), the file-hash cache of the run manifest
(splice/rundir/manifest.py) and the needles' answers (engine/invariant/needle.py and
engine/invariant/cuda_needle.py, `needle/`).
Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Where converted checkpoints live: $NUDGE_CACHE, else $XDG_CACHE_HOME/nudgeability, else ~/.cache/nudgeability."""
    if os.environ.get("NUDGE_CACHE"):
        return Path(os.environ["NUDGE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache")
    return Path(base) / "nudgeability"
