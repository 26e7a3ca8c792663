"""Replaying units of a stored run with the runner's own code, compared byte for byte.

Which units to replay (`select_replay`: `--all`, a sample of K drawn with a seed, 2 by default,
none for a remote run unless asked) and the replay itself (`replay_check`; `replay_units` gives
the results unit by unit) return their outcome as a `Check` for `nudge verify` to print.

The manifest's config is resolved again by `prepare` (the same validation, problem draw, prompts
and splice ids as `nudge run`), and each chosen unit is computed by the runner's `compute_unit`
into a temporary directory, then compared with the stored part file line by line (and a B unit's
hidden-state side file, `signals/<unit>.npy`, byte for byte). An arms or resolution unit is
computed from the stored parts it builds on (`Plan.inputs_of`), copied into the temporary
directory as the run read them. Nothing is written into the run directory.
"""

from __future__ import annotations

import contextlib
import random
import secrets
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from nudgeability.backends.http_client import RemoteError, public_url
from nudgeability.splice.audit.check import FAIL, OK, SKIPPED, Check
from nudgeability.splice.audit.record_diff import first_difference
from nudgeability.splice.audit.stored_run import StoredRun
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.device_batching import batches_from_pool
from nudgeability.splice.run.prepare import prepare
from nudgeability.splice.run.remote import RemoteSpec, remote_spec_of
from nudgeability.splice.run.runner import compute_unit, unit_context
from nudgeability.splice.run.schedule import STREAM
from nudgeability.splice.run.units import UnitContext
from nudgeability.splice.run.validation import resolve_device
from nudgeability.splice.rundir.layout import MANIFEST, side_file
from nudgeability.splice.rundir.manifest import Manifest, UserInterventions
from nudgeability.splice.rundir.manifest_keys import SCHEDULE_KEY, compare_manifests
from nudgeability.splice.rundir.plan import Unit
from nudgeability.splice.rundir.store import WorkStore, part_path
from nudgeability.util.json_lines import split_lines
from nudgeability.util.threads import set_threads

DEFAULT_SAMPLE = 2  # units a local run's audit replays when not told otherwise

# compare_manifests ignores where the inputs are (manifest_keys.LOCATION_KEYS); replaying on another
# device than the run's (--device) changes the config's device too, and leaves out the stored
# device's share of free memory for the KV pool and its fixed-shape decode (both refused on a CPU;
# the new device's defaults)
_DEVICE_KEYS = ("config.device", "config.gpu_memory_utilization", "config.static_decode")


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
    interventions: str | None = None,
) -> list[UnitReplay]:
    """Recompute `units` with the manifest's configuration and compare each with its part file.

    `model`, `data`, `sentences`, `interventions` give moved inputs again; `device` replays on another device than
    the run's (whose floating-point results may differ in the last bits). `remote` sends a remote
    run's requests again to its server (splice/run/remote.py `remote_spec_of`). Raises `ReplayError`
    when the configuration no longer resolves to the stored run (another problem draw, family,
    inputs, served model...), naming the differing manifest keys, or when the server fails.
    """
    overrides = {"model": model, "data": data, "sentences": sentences, "device": device}
    overrides["interventions"] = interventions
    requested = _requested(run.manifest.config, overrides, remote is not None)
    try:
        # the run's own interventions as its manifest recorded them: the file is never run again
        recorded = UserInterventions.of_manifest(run.manifest.data)
        prepared = prepare(requested, remote=remote, recorded=recorded)
    except (ValueError, OSError) as exc:
        raise ReplayError(f"the manifest's configuration cannot be rebuilt here: {exc}") from None
    differences = [
        line
        for line in compare_manifests(run.manifest.data, prepared.manifest, ("stored", "here"))[0]
        if not (device and line.startswith(tuple(f"{key}:" for key in _DEVICE_KEYS)))
    ]
    if differences:
        raise ReplayError(
            f"the manifest's configuration resolves to another run here ({len(differences)} "
            f"difference(s): {'; '.join(differences)})"
        )
    # a run streamed on CUDA computed with the engine's batch-invariant kernels: so does its replay
    stream = (run.manifest.data.get(SCHEDULE_KEY) or {}).get("name") == STREAM
    ctx = unit_context(prepared, progress=False, stream=stream)
    try:
        with _threads_of(run.manifest):
            return _replay(run, units, ctx)
    except RemoteError as exc:  # the server went away or refused mid-replay: one line
        raise ReplayError(f"the server did not answer the replay: {exc}") from None
    finally:
        ctx.backend.close()


@contextlib.contextmanager
def _threads_of(manifest: Manifest):
    """torch's CPU threads as the run had them (the manifest's `threads`, when recorded): another
    count can change how a CPU sums, and so the last bits of a logit."""
    before = torch.get_num_threads()
    stored = manifest.data.get("threads")
    set_threads(stored if isinstance(stored, int) and stored >= 1 else None)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _replay(run: StoredRun, units: Sequence[Unit], ctx: UnitContext) -> list[UnitReplay]:
    """Each unit computed by the runner into a scratch directory and compared with its part."""
    scratch = Path(tempfile.mkdtemp(prefix="nudge-verify-"))
    try:
        with WorkStore.open(scratch / "replay", run.manifest.data) as store:
            results = []
            for unit in units:
                stored = part_path(run.root, unit)
                problem = _stage(run, store, unit) if stored.is_file() else "missing"
                if problem is not None:
                    results.append(UnitReplay(unit, f"{stored}: {problem}; nothing to compare"))
                    continue
                compute_unit(ctx, store, unit)
                difference = _unit_difference(stored, store.part_path(unit))
                if difference is None:  # the records agree: so must the side file they point at
                    side = side_file(unit.name)
                    difference = _side_difference(run.root / side, store.root / side)
                results.append(UnitReplay(unit, difference))
            return results
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _stage(run: StoredRun, store: WorkStore, unit: Unit) -> str | None:
    """Copy the stored parts a unit builds on (`Plan.inputs_of`: an arms unit its bases, a
    resolve unit the chunk's records), as the run read them, into `store`; what prevents the
    replay, or None."""
    for source_unit in run.plan.inputs_of(unit):
        source = part_path(run.root, source_unit)
        if not source.is_file():
            return f"the part it builds on, {source}, is missing"
        store.copy_part(source_unit, source)
    return None


def _requested(config: dict, overrides: dict[str, str | None], remote: bool) -> RunConfig:
    """The stored (resolved) config, asked for again, with the inputs given anew (if any). A
    remote run's dtype and device resolved to `config.SERVER`, which `prepare` sets itself
    when given the server: they are asked for as `nudge run` asks them (the defaults)."""
    stored = RunConfig.from_dict(config)
    if remote:
        stored = replace(stored, dtype=RunConfig.dtype, device=RunConfig.device)
    device = overrides.get("device")
    if device is not None:  # another device: its own memory share (_DEVICE_KEYS), and the
        # fixed-shape decode kept only where it runs (CUDA), so that a CUDA replay computes as
        # the run did
        graphs = stored.static_decode and batches_from_pool(resolve_device(device))
        stored = replace(stored, gpu_memory_utilization=None, static_decode=graphs)
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


# ----- the policy of `nudge verify`: which units, and the outcome as a check -----------------------
@dataclass(frozen=True)
class ReplaySelection:
    """The units a replay regenerates, and the server a remote run's replay asks again."""

    units: tuple[Unit, ...]
    total: int  # units of the run
    seed: int  # the seed of the draw (printed, so that another auditor can repeat it)
    everything: bool  # --all
    remote: RemoteSpec | None = None

    @property
    def description(self) -> str:
        """'every unit', or e.g. '2 of 6 units (--seed 11)'."""
        if self.everything:
            return "every unit"
        return f"{len(self.units)} of {self.total} units (--seed {self.seed})"


def select_replay(
    run: StoredRun,
    *,
    sample: int | None = None,
    everything: bool = False,
    seed: int | None = None,
    base_url: str | None = None,
    tokenizer: str | None = None,
    api_key_env: str | None = None,
) -> ReplaySelection | Check:
    """The units to regenerate: all of them (`everything`), `sample` drawn with `seed` (a fresh
    seed when None), else `DEFAULT_SAMPLE`; a remote run only when asked (it sends requests to
    its server, perhaps a paid provider). A `Check` instead when nothing is replayed or the
    remote run's manifest cannot say where to."""
    units = run.units()
    if everything:
        sample = None
    elif sample is None:
        if run.remote:
            return Check(
                "replay",
                SKIPPED,
                "a remote run is replayed only when asked (--sample K or --all): it sends "
                f"requests to {public_url(base_url or _endpoint(run))}",
            )
        sample = DEFAULT_SAMPLE
    if sample == 0:
        return Check("replay", SKIPPED, "--sample 0: no unit regenerated")
    remote = None
    if run.remote:
        try:
            remote = remote_spec_of(
                run.manifest, base_url=base_url, tokenizer=tokenizer, api_key_env=api_key_env
            )
        except (KeyError, TypeError) as exc:
            return Check("replay", FAIL, f"{run.root / MANIFEST}: field {exc} missing or malformed")
    seed = seed if seed is not None else secrets.randbelow(1 << 31)
    chosen = choose_units(units, sample, seed)
    return ReplaySelection(tuple(chosen), len(units), seed, everything, remote)


def replay_check(
    run: StoredRun,
    selection: ReplaySelection,
    *,
    model: str | None = None,
    data: str | None = None,
    sentences: str | None = None,
    device: str | None = None,
    interventions: str | None = None,
) -> Check:
    """Regenerate the selected units and say whether every one equals its stored part."""
    overrides = {"data": data, "sentences": sentences, "interventions": interventions}
    if selection.remote is not None:
        overrides["remote"] = selection.remote
    else:
        overrides.update(model=model, device=device)
    try:
        results = replay_units(run, selection.units, **overrides)
    except ReplayError as exc:
        return Check("replay", FAIL, str(exc))
    differing = [result for result in results if result.difference is not None]
    if differing:
        names = ", ".join(result.unit.name for result in differing)
        return Check(
            "replay",
            FAIL,
            f"{len(differing)} of {len(results)} regenerated units differ ({names}); "
            f"first: {differing[0].difference}",
        )
    names = ", ".join(result.unit.name for result in results)
    where = selection.remote.base_url if selection.remote is not None else None
    return Check(
        "replay",
        OK,
        f"{selection.description} regenerated byte for byte: {names}",
        _moved(run, device, where),
    )


def _moved(run: StoredRun, device: str | None, base_url: str | None) -> tuple[str, ...]:
    """A replay on another device, or against another server, than the run's: a warning."""
    stored_device = run.manifest.config.get("device")
    if device not in (None, stored_device):
        return (f"replayed on {device}, the run computed on {stored_device}",)
    if base_url not in (None, _endpoint(run)):
        return (f"replayed against {public_url(base_url)}, the run was sent to {_endpoint(run)}",)
    return ()


def _endpoint(run: StoredRun) -> str | None:
    """The server URL a remote run was sent to (without credentials), as its manifest says."""
    endpoint = run.manifest.endpoint
    return endpoint.get("base_url") if isinstance(endpoint, dict) else None
