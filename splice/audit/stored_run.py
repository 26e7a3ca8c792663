"""A finished run directory opened for an audit: its manifest and the plan it calls for.

The plan is the runner's own (`Plan.from_manifest`, splice/rundir/plan.py), never a copy, so the
audit checks exactly the keys, units and order the runner wrote. Opening reads the directory and
never writes to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nudgeability.splice.run.remote import is_remote
from nudgeability.splice.rundir.layout import MANIFEST
from nudgeability.splice.rundir.manifest import Manifest, OutputDirError, read_manifest
from nudgeability.splice.rundir.plan import Plan, Unit


@dataclass(frozen=True)
class StoredRun:
    """A run directory and the plan its manifest calls for."""

    root: Path
    manifest: Manifest = field(repr=False)
    plan: Plan

    @property
    def remote(self) -> bool:
        """Whether the run was computed by a server (`nudge run --backend openai`)."""
        return is_remote(self.manifest)

    def units(self) -> list[Unit]:
        """This run's units of work, in order of work."""
        return self.plan.units()


def open_run(root: str | Path) -> StoredRun:
    """Read a run directory's manifest and rebuild its plan (OutputDirError naming the field)."""
    root = Path(root)
    if not root.is_dir():
        raise OutputDirError(f"{root}: no such directory; pass a run directory of `nudge run`")
    manifest = read_manifest(root)
    return StoredRun(root, manifest, Plan.from_manifest(manifest.data, root / MANIFEST))
