"""Replaying units of a stored run with the runner's own code, compared byte for byte.

The manifest's config is resolved again by `prepare` (the same validation, problem draw, prompts
and splice ids as `nudge run`), and each chosen unit is computed by the runner's `compute_unit`
into a temporary directory, then compared with the stored part file line by line (and a B unit's
hidden-state side file, `signals/<unit>.npy`, byte for byte). An arms unit
forks from its bases' stored records, as the runner's does (they are copied into the temporary
directory). Nothing is written into the run directory.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from nudgeability.splice.experiment.conditions import BASE_CODES
from nudgeability.splice.manifest import compare_manifests
from nudgeability.splice.plan import Unit, phases_of
from nudgeability.splice.record_diff import first_difference
from nudgeability.splice.run_config import RunConfig
from nudgeability.splice.verify import StoredRun
from nudgeability.splice.work_store import SIGNALS_DIR, WorkStore, part_path, split_lines

if TYPE_CHECKING:
    from nudgeability.splice.backend_setup import RemoteSpec
    from nudgeability.splice.units import UnitContext

# compare_manifests ignores where the inputs are (manifest.LOCATION_KEYS); replaying on another
# device than the run's (--device) changes the config's device too
_DEVICE_KEY = "config.device"


class ReplayError(ValueError):
    """The stored run cannot be rebuilt here; the message says why."""


@dataclass(frozen=True)
class UnitReplay:
    """One replayed unit: `difference` is None when the bytes are identical."""

    unit: Unit
    difference: str | None


def choose_units(units: Sequence[Unit], sample: int | None, seed: int) -> list[Unit]:
    """`sample` units drawn with `seed` (all of them when `sample` is None), in order of work."""
    if sample is None or sample >= len(units):
        return list(units)
    chosen = set(random.Random(seed).sample(range(len(units)), sample))
    return [unit for i, unit in enumerate(units) if i in chosen]


def replay_units(
    run: StoredRun,
    units: Sequence[Unit],
    *,
    model: str | None = None,
    data: str | None = None,
    sentences: str | None = None,
    device: str | None = None,
    remote: RemoteSpec | None = None,
) -> list[UnitReplay]:
    """Recompute `units` with the manifest's configuration and compare each with its part file.

    `model`, `data`, `sentences` give moved inputs again; `device` replays on another device than
    the run's (whose floating-point results may differ in the last bits). `remote` sends a remote
    run's requests again to its server (`backend_setup.remote_spec_of`). Raises `ReplayError`
    when the configuration no longer resolves to the stored run (another problem draw, family,
    inputs, served model...), naming the differing manifest keys, or when the server fails.
    """
    from nudgeability.backends.http_client import RemoteError
    from nudgeability.splice.prepare import prepare
    from nudgeability.splice.runner import unit_context

    overrides = {"model": model, "data": data, "sentences": sentences, "device": device}
    requested = _requested(run.manifest["config"], overrides, remote is not None)
    try:
        prepared = prepare(requested, remote=remote)
    except (ValueError, OSError) as exc:
        raise ReplayError(f"the manifest's configuration cannot be rebuilt here: {exc}") from None
    differences = [
        line
        for line in compare_manifests(run.manifest, prepared.manifest, ("stored", "here"))[0]
        if not (device and line.startswith(_DEVICE_KEY + ":"))
    ]
    if differences:
        raise ReplayError(
            f"the manifest's configuration resolves to another run here ({len(differences)} "
            f"difference(s): {'; '.join(differences)})"
        )
    ctx = unit_context(prepared, progress=False)
    try:
        with _threads_of(run.manifest):
            return _replay(run, units, ctx)
    except RemoteError as exc:  # the server went away or refused mid-replay: one line
        raise ReplayError(f"the server did not answer the replay: {exc}") from None
    finally:
        ctx.backend.close()


@contextlib.contextmanager
def _threads_of(manifest: dict):
    """torch's CPU threads as the run had them (the manifest's `threads`, when recorded): another
    count can change how a CPU sums, and so the last bits of a logit."""
    import torch

    from nudgeability.engine.threads import set_threads

    before = torch.get_num_threads()
    stored = manifest.get("threads")
    set_threads(stored if isinstance(stored, int) and stored >= 1 else None)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _replay(run: StoredRun, units: Sequence[Unit], ctx: UnitContext) -> list[UnitReplay]:
    """Each unit computed by the runner into a scratch directory and compared with its part."""
    from nudgeability.splice.runner import compute_unit

    phases = phases_of(run.conditions, bool(run.manifest["config"].get("resolve")))
    scratch = Path(tempfile.mkdtemp(prefix="nudge-verify-"))
    try:
        with WorkStore.open(scratch / "replay", run.manifest) as store:
            results = []
            for unit in units:
                stored = part_path(run.root, unit)
                problem = _stage(run, store, unit, phases) if stored.is_file() else "missing"
                if problem is not None:
                    results.append(UnitReplay(unit, f"{stored}: {problem}; nothing to compare"))
                    continue
                compute_unit(ctx, store, unit, list(run.chunks[unit.chunk]))
                difference = _unit_difference(stored, store.part_path(unit))
                if difference is None:  # the records agree: so must the side file they point at
                    side = Path(SIGNALS_DIR) / f"{unit.name}.npy"
                    difference = _side_difference(run.root / side, store.root / side)
                results.append(UnitReplay(unit, difference))
            return results
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _stage(run: StoredRun, store: WorkStore, unit: Unit, phases: list[str]) -> str | None:
    """Copy the stored parts a unit builds on (an arms unit its bases, a resolve unit the chunk's
    records), as the run read them, into `store`; what prevents the replay, or None."""
    if unit.phase in BASE_CODES:
        return None
    for phase in phases[: phases.index(unit.phase)]:
        source = part_path(run.root, Unit(phase, unit.seed, unit.chunk))
        if not source.is_file():
            return f"the part it builds on, {source}, is missing"
        shutil.copyfile(source, store.part_path(Unit(phase, unit.seed, unit.chunk)))
    return None


def _requested(config: dict, overrides: dict[str, str | None], remote: bool) -> RunConfig:
    """The stored (resolved) config, asked for again, with the inputs given anew (if any). A
    remote run's dtype and device resolved to `run_config.SERVER`, which `prepare` sets itself
    when given the server: they are asked for as `nudge run` asks them (the defaults)."""
    stored = RunConfig.from_dict(config)
    if remote:
        stored = replace(stored, dtype=RunConfig.dtype, device=RunConfig.device)
    return replace(stored, **{k: v for k, v in overrides.items() if v is not None})


def _side_difference(stored: Path, replayed: Path) -> str | None:
    """None when a unit's side file (B's hidden states) is the same bytes as the replay's, or
    neither exists; else what differs (the first differing row)."""
    if not stored.is_file() and not replayed.is_file():
        return None
    if not replayed.is_file():
        return f"{stored}: a side file the replay did not write"
    if not stored.is_file():
        return f"{stored}: missing; the replay wrote it"
    if stored.read_bytes() == replayed.read_bytes():
        return None
    import numpy as np

    try:
        ours = np.load(stored, allow_pickle=False)
    except (ValueError, OSError) as exc:
        return f"{stored}: not a readable .npy ({exc}); the replay wrote one"
    theirs = np.load(replayed, allow_pickle=False)
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return (
            f"{stored}: {ours.dtype} {ours.shape}, the replay's hidden states {theirs.dtype} "
            f"{theirs.shape}"
        )
    rows = np.flatnonzero((ours != theirs).reshape(len(ours), -1).any(axis=1))
    if not len(rows):
        return f"{stored}: same values, other bytes (the .npy header)"
    return (
        f"{stored}: row {rows[0]} differs from the replayed hidden state ({len(rows)} rows differ)"
    )


def _unit_difference(stored: Path, replayed: Path) -> str | None:
    """None when the two part files hold the same bytes; else the first differing record."""
    if stored.read_bytes() == replayed.read_bytes():
        return None
    ours = split_lines(stored.read_text(encoding="utf-8"))
    theirs = split_lines(replayed.read_text(encoding="utf-8"))
    for number, (line, again) in enumerate(zip(ours, theirs), 1):
        if line != again:
            return f"{stored}:{number}: {first_difference(line, again)}"
    return f"{stored}: holds {len(ours)} records, the replay {len(theirs)}"
