"""Which keys of a run manifest decide what, stated once, and the comparison of two manifests.

A manifest (splice/rundir/manifest.py: its schema, writer and reader) holds keys of four kinds:
`IDENTITY_KEYS` decide the records, so a resumed run and a merged shard must match them;
`PROVENANCE_KEYS` say which code and which machine share ran it (a difference is reported, not
refused); the seal, the fallbacks, `shown` and the schedule are facts about one finished process,
never compared; and `LOCATION_KEYS` say where the inputs were found, whose sha256 decide instead.
`identity` is what a resume and a merge compare (`compare_manifests`); `experiment_settings` is
the same less `WORK_KEYS` (how the work was split, batched and placed): what runs pooled into one
experiment by the stats must match. A key no list names counts as identity.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping

# what decides the records: a resumed run or a merged shard must match these exactly
IDENTITY_KEYS = ("format", "experiment", "config", "family", "seeds", "problems", "inputs")
# where the code came from, the server URL of a remote run, and the torch CPU thread count (set by
# --threads): a difference is reported, not refused (a commit may change nothing; a server may move)
PROVENANCE_KEYS = ("versions", "git_commit", "endpoint", "threads")
# what a finished run wrote (splice/rundir/seal.py): checked by `nudge verify`, never compared
# between two manifests
SEAL_KEY = "seal"
# every fallback from a fast path the run took (`nudgeability.util.fallbacks.taken()`, as dicts),
# written with the seal: a fact about the device and libraries of the process that finished the
# run, never compared (a resume on other hardware may meet others), like the seal
FALLBACKS_KEY = "fallbacks"
# what the run showed the model, for the report: read from the data and sentences files, whose
# sha256 are identity keys, so never compared (a run made before the key existed resumes)
SHOWN_KEY = "shown"
# the length of each base's shared start (NT, B, oracle_B: splice/experiment/shared_start.py), on
# the in-process engine: an identity key, so a resume, merge or replay whose code derives another
# start (and so computes other bits) is refused, naming it; a work key for pooling
SHARED_START_KEY = "shared_start"
# where the inputs were found: not compared, their sha256 (under the same "inputs" keys) decide. A resume with another NUDGE_CACHE, or a checkpoint or data file moved or
# copied elsewhere, reuses the stored records when every hash is the same.
LOCATION_KEYS = (
    ("config", "model"),
    ("config", "data"),
    ("config", "sentences"),
    ("config", "interventions"),
    ("inputs", "data", "path"),
    ("inputs", "sentences", "path"),
    ("inputs", "interventions", "path"),
    ("inputs", "checkpoint", "directory"),
    ("inputs", "checkpoint", "gguf", "path"),
    ("inputs", "tokenizer", "directory"),  # a run on a server: its tokenizer's directory
)
# How one experiment's work was split, batched and placed, and how faithfully a server continued
# it: a resume and a merge compare these like any identity key (a merge lets `config.shard`
# differ), while runs pooled into one experiment may differ in them (the pooled level is the
# least faithful one, records.least_faithful).
WORK_KEYS = (
    ("config", "shard"),
    ("config", "seeds"),
    ("config", "chunk_size"),
    ("config", "max_batch_tokens"),
    ("config", "gpu_memory_utilization"),  # the KV pool's share of free CUDA memory
    ("config", "static_decode"),  # CUDA's fixed-shape decode: how a step computes, not what
    ("config", "device"),
    ("seeds",),
    ("experiment", "seeds"),
    ("experiment", "continuation"),
    (SHARED_START_KEY,),  # how the prompts are computed (a logit's last bits), not what is asked
)
# which schedule computed the run and why (`{"name": "stream" | "units", "why": ..., and the
# invariance check it rests on}`, splice/run/runner.py): written with the seal, never compared,
# since both schedules give the same records where the check holds
SCHEDULE_KEY = "schedule"
_NOT_COMPARED = (SEAL_KEY, FALLBACKS_KEY, SHOWN_KEY, SCHEDULE_KEY)


def identity(manifest: Mapping) -> dict:
    """What decides a run's records: the manifest less its provenance, seal, fallbacks, `shown`
    and input locations (keys this module does not name count as identity)."""
    unread = PROVENANCE_KEYS + _NOT_COMPARED
    found = copy.deepcopy({k: v for k, v in manifest.items() if k not in unread})
    for path in LOCATION_KEYS:
        _pop_path(found, path)
    return found


def experiment_settings(manifest: Mapping) -> dict[str, object] | None:
    """What runs pooled into one experiment must agree on, as flat `a.b.c: value` pairs: the
    identity less `WORK_KEYS`. None for a manifest without a config (written by hand or by an
    older version: nothing to compare)."""
    config = manifest.get("config")
    if not isinstance(config, dict) or set(config) <= {"conditions"}:
        return None
    found = identity(manifest)
    for path in WORK_KEYS:
        _pop_path(found, path)
    return _flat(found)


def _flat(value: object, prefix: str = "") -> dict[str, object]:
    if not isinstance(value, dict):
        return {prefix.rstrip("."): value}
    flat: dict[str, object] = {}
    for key in sorted(value):
        flat |= _flat(value[key], f"{prefix}{key}.")
    return flat


def compare_manifests(
    old: Mapping, new: Mapping, labels: tuple[str, str] = ("stored", "now")
) -> tuple[list[str], list[str]]:
    """(identity differences, provenance differences) between two manifests, one line per key.

    Identity keys (config, input hashes, problems, ...) decide the records; provenance keys
    (versions, git commit) say which code ran. `LOCATION_KEYS` (where the inputs were found) are
    not compared: the inputs' sha256 are, so a moved or re-cached file is no difference. Keys
    outside these lists count as identity.
    """

    def provenance(manifest: Mapping) -> dict:
        return {k: v for k, v in manifest.items() if k in PROVENANCE_KEYS}

    return (
        diff_configs(identity(old), identity(new), labels),
        diff_configs(provenance(old), provenance(new), labels),
    )


def diff_configs(
    old: object, new: object, labels: tuple[str, str] = ("stored", "now"), prefix: str = ""
) -> list[str]:
    """One line per key whose value differs between two JSON values (nested dicts are walked).

    Lines read `key: stored X, now Y` (with `labels` naming the two sides), sorted by key.
    """
    if isinstance(old, dict) and isinstance(new, dict):
        lines = []
        for key in sorted(set(old) | set(new)):
            name = f"{prefix}{key}"
            if key not in old:
                lines.append(f"{name}: {labels[0]} nothing, {labels[1]} {_short(new[key])}")
            elif key not in new:
                lines.append(f"{name}: {labels[0]} {_short(old[key])}, {labels[1]} nothing")
            else:
                lines.extend(diff_configs(old[key], new[key], labels, f"{name}."))
        return lines
    if old != new:
        return [f"{prefix.rstrip('.')}: {labels[0]} {_short(old)}, {labels[1]} {_short(new)}"]
    return []


def _short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _pop_path(data: dict, path: tuple[str, ...]):
    """Remove and return the value at `path` in nested dicts (None when absent)."""
    for key in path[:-1]:
        data = data.get(key) if isinstance(data, dict) else None
    return data.pop(path[-1], None) if isinstance(data, dict) else None
