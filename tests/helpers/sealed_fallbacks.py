"""The fallbacks a run's manifest lists if it is sealed now: the runner's own seal
(splice/rundir/store.py `WorkStore.seal`, which writes `util.fallbacks.taken()` beside it) of an
empty run directory, read back from its manifest.json. Tests that force a fast path to fall back
on CPU, where no `nudge run` can reach the CUDA path, find their fallback where a run keeps it."""

from __future__ import annotations

import json
from pathlib import Path

from nudgeability.splice.rundir.store import WorkStore


def manifest_fallbacks(root: Path) -> list[dict]:
    """The `fallbacks` of the manifest a run sealed in `root` (a new directory) now writes."""
    with WorkStore.open(root, {"config": {"n": 1}}) as store:
        store.write_records([])
        store.seal()
    return json.loads((Path(root) / "manifest.json").read_text())["fallbacks"]
