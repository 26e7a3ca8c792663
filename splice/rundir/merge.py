"""Joining the outputs of `nudge run --shard K/N` into the output of the unsharded run.

    nudge merge runs/all runs/shard1 runs/shard2 runs/shard3

The shards must be complete (each holds its records.jsonl and is sealed), be exactly shards 1..N
of one N, have manifests equal in everything but `config.shard`, and hold exactly the bytes each
sealed (`seal.py` `check_seal`: a part or records file changed since is refused, naming it). Chunk i of the drawn problems was computed
by shard i % N + 1, batched as the unsharded run batches it, so concatenating the shards' records
chunk by chunk gives the unsharded records byte for byte. The merged directory gets the manifest
with `config.shard` null (the unsharded run's) sealed with the hashes of the merged files and
parts, the records (and, for runs made with `--resolve`, the resolutions, merged the same way),
the shards' timings and their part files (hard-linked where possible), so it is also a finished,
resumable unsharded run directory. Its `fallbacks` are every shard's, each once, in shard order
(a shard on another machine may have met others; they are never compared).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from nudgeability.splice.rundir.layout import (
    MANIFEST,
    PART_SUFFIX,
    PARTS,
    RECORDS,
    RESOLUTIONS,
    SIDE_SUFFIX,
    SIGNALS_DIR,
    TIMINGS,
)
from nudgeability.splice.rundir.manifest import Manifest, OutputDirError, read_manifest
from nudgeability.splice.rundir.manifest_keys import FALLBACKS_KEY, SEAL_KEY, compare_manifests
from nudgeability.splice.rundir.plan import Plan
from nudgeability.splice.rundir.records import RecordKey
from nudgeability.splice.rundir.seal import check_seal, write_sealed_manifest
from nudgeability.util.atomic import atomic_directory, atomic_write_lines, remove_temporaries
from nudgeability.util.json_lines import JsonLine, json_lines, split_lines


class MergeError(ValueError):
    """Shard directories that cannot be merged; the message names the directory and the problem."""


@dataclass(frozen=True)
class MergeResult:
    out: Path
    shards: int
    records: int
    provenance_changes: tuple[str, ...]  # versions / git commits that differ between the shards


def merge(out: str | os.PathLike, shard_dirs: Sequence[str | os.PathLike]) -> MergeResult:
    """Merge complete shard directories into `out` (which must not exist yet, or be empty)."""
    dirs = [Path(d) for d in shard_dirs]
    if not dirs:
        raise MergeError("give at least one shard directory")
    manifests = [read_manifest(d) for d in dirs]
    total, provenance = _check_shards(dirs, manifests)
    merged_manifest = _without_shard(manifests[0])
    fallbacks = _fallbacks_of(sorted(manifests, key=lambda m: m.config["shard"][0]))
    out = Path(out).absolute()
    if out.parent.is_dir():  # what a killed merge into `out` left (its process is gone)
        remove_temporaries(out.parent, out.name, only_abandoned=True)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise OutputDirError(
            f"{out}: already exists and is not empty; pass a new directory to merge into"
        )
    by_shard = {manifest.config["shard"][0]: d for manifest, d in zip(manifests, dirs)}
    plan = Plan.from_manifest(merged_manifest, dirs[0] / MANIFEST)  # the unsharded run's plan
    shard_of = {chunk: chunk % total + 1 for chunk in plan.mine}  # chunk i: shard i % N + 1

    with atomic_directory(out) as tmp:
        streams = {k: _Lines(d / RECORDS) for k, d in by_shard.items()}
        tally = [0]

        def merged_lines() -> Iterator[str]:
            for chunk in plan.mine:
                stream = streams[shard_of[chunk]]
                ids = plan.problems_of(chunk)
                seen = set()
                for line in stream.take_while(set(ids)):
                    seen.add(RecordKey.of(line.value))
                    tally[0] += 1
                    yield line.text
                bases = [key for key in plan.keys(chunk) if key.condition in plan.base_codes]
                missing = [key for key in bases if key not in seen]
                if missing:
                    raise MergeError(
                        f"{stream.path}: no record for {missing[0]} (chunk {chunk}); "
                        "the shard is incomplete: run it again to finish it"
                    )
            for stream in streams.values():
                stream.expect_end()

        atomic_write_lines(tmp / RECORDS, merged_lines())
        if plan.resolve:
            resolutions = {k: _Lines(d / RESOLUTIONS) for k, d in by_shard.items()}

            def merged_resolutions() -> Iterator[str]:
                for chunk in plan.mine:
                    ids = set(plan.problems_of(chunk))
                    yield from (line.text for line in resolutions[shard_of[chunk]].take_while(ids))
                for stream in resolutions.values():
                    stream.expect_end()

            atomic_write_lines(tmp / RESOLUTIONS, merged_resolutions())
        timings = []
        for k in sorted(by_shard):
            path = by_shard[k] / TIMINGS
            if path.is_file():
                timings.extend(split_lines(path.read_text(encoding="utf-8")))
        atomic_write_lines(tmp / TIMINGS, timings)
        _link_parts([by_shard[k] / PARTS for k in sorted(by_shard)], tmp / PARTS)
        # the hidden states the B records point at (signals/<unit>.npy; unit names are unique)
        _link_parts(
            [by_shard[k] / SIGNALS_DIR for k in sorted(by_shard)],
            tmp / SIGNALS_DIR,
            f"*{SIDE_SUFFIX}",
        )
        # the manifest last, sealed with the merged records, parts and side files (as a finished
        # run's is)
        write_sealed_manifest(tmp, merged_manifest, fallbacks)
    return MergeResult(out, total, tally[0], tuple(provenance))


def _fallbacks_of(manifests: list[Manifest]) -> list[dict] | None:
    """Every fallback any shard took (`FALLBACKS_KEY`), each once, in shard order and then in
    the order each shard lists them: each shard's process met its own device and libraries, and
    the merged run's parts were computed under all of them. None when no shard lists any key
    (shards sealed before fallbacks were recorded)."""
    listed = [
        m.data[FALLBACKS_KEY] for m in manifests if isinstance(m.data.get(FALLBACKS_KEY), list)
    ]
    if not listed:
        return None
    union: list[dict] = []
    for taken in listed:
        union += [fallback for fallback in taken if fallback not in union]
    return union


def _without_shard(manifest: Manifest) -> dict:
    merged = copy.deepcopy(manifest.data)
    merged["config"]["shard"] = None
    merged.pop(SEAL_KEY, None)  # each shard's seal covers its own files only
    return merged


def _check_shards(dirs: list[Path], manifests: list[Manifest]) -> tuple[int, list[str]]:
    """The shard count N, after checking that the directories are shards 1..N of one run, and the
    differences in versions or git commit between them (reported, not refused)."""
    shards = []
    for d, manifest in zip(dirs, manifests):
        shard = manifest.config.get("shard")
        if not (isinstance(shard, list) and len(shard) == 2):
            raise MergeError(
                f"{d / MANIFEST}: config.shard is {json.dumps(shard)}; not a shard of a run"
            )
        wanted = [RECORDS] + ([RESOLUTIONS] if manifest.config.get("resolve") else [])
        for name in wanted:
            if not (d / name).is_file():
                raise MergeError(
                    f"{d}: no {name}; the shard is not finished: run it again to complete it"
                )
        shards.append(tuple(shard))
    total = shards[0][1]
    reference = _without_shard(manifests[0])
    provenance: list[str] = []
    for d, shard, manifest in zip(dirs, shards, manifests):
        if shard[1] != total:
            raise MergeError(
                f"{d / MANIFEST}: shard {shard[0]}/{shard[1]}, but {dirs[0]} is a shard of {total}"
            )
        labels = (f"shard {shards[0][0]}/{total} has", f"shard {shard[0]}/{shard[1]} has")
        differences, changed = compare_manifests(reference, _without_shard(manifest), labels)
        provenance.extend(changed)
        if differences:
            raise MergeError(
                f"{d / MANIFEST}: differs from {dirs[0] / MANIFEST} in {len(differences)} "
                f"key(s): {'; '.join(differences)}"
            )
    for d, manifest in zip(dirs, manifests):  # the same rule as a resume's: sealed bytes only
        sealed = check_seal(d, manifest.data)
        if not sealed.sealed:
            raise MergeError(
                f"{d / MANIFEST}: not sealed; the shard is not finished: run it again to complete it"
            )
        if sealed.problems:
            more = f" (and {len(sealed.problems) - 1} more)" if len(sealed.problems) > 1 else ""
            raise MergeError(
                f"{sealed.problems[0]}{more}: the shard {d} holds files other than the ones it "
                "sealed; run the shard again (its damaged units are recomputed), then merge"
            )
    numbers = sorted(k for k, _ in shards)
    if len(set(numbers)) != len(numbers):
        raise MergeError(
            f"shard {next(k for k in numbers if numbers.count(k) > 1)}/{total} is given twice"
        )
    missing = sorted(set(range(1, total + 1)) - set(numbers))
    if missing:
        raise MergeError(
            f"shard(s) {', '.join(f'{k}/{total}' for k in missing)} missing; give all {total} shards"
        )
    return total, provenance


class _Lines:
    """A shard's records.jsonl read line by line (the one JSON-lines reader), with one line of
    look-ahead."""

    def __init__(self, path: Path):
        self.path = path
        self._lines = json_lines(path, MergeError, skip_blank=False)
        self._next: JsonLine | None = next(self._lines, None)
        self._number = 0 if self._next is None else self._next.number

    def take_while(self, problem_ids: set[str]) -> Iterator[JsonLine]:
        """The consecutive lines whose problem is in `problem_ids`."""
        while self._next is not None and self._next.value.get("problem_id") in problem_ids:
            yield self._next
            self._next = next(self._lines, None)
            if self._next is not None:
                self._number = self._next.number

    def expect_end(self) -> None:
        if self._next is not None:
            raise MergeError(
                f"{self.path}:{self._number}: unexpected record for problem "
                f"{self._next.value.get('problem_id')!r} (not in this shard's chunks, or out of order)"
            )


def _link_parts(sources: list[Path], target: Path, pattern: str = f"*{PART_SUFFIX}") -> None:
    target.mkdir()
    for source in sources:
        if not source.is_dir():
            continue
        for part in sorted(source.glob(pattern)):
            try:
                os.link(part, target / part.name)
            except OSError:
                shutil.copy2(part, target / part.name)
