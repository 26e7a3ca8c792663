"""The manifest: checkpoint hashes (sha256 of the bytes, remembered for large files until the file
changes) and the differences between two configs, one line per nested key."""

from __future__ import annotations

import hashlib
import json
import os

import nudgeability.splice.rundir.manifest as manifest
import nudgeability.splice.rundir.manifest_keys as manifest_keys
import nudgeability.splice.rundir.provenance as provenance


def test_large_file_hash_is_cached_and_invalidated_by_a_change(tmp_path, monkeypatch):
    monkeypatch.setenv("NUDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(provenance, "CACHED_HASH_MIN_BYTES", 0)
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"weights" * 1000)
    real = hashlib.sha256(f.read_bytes()).hexdigest()
    assert provenance.sha256_file(f) == real
    cache = tmp_path / "cache" / "sha256.json"
    entries = json.loads(cache.read_text())
    assert list(entries.values()) == [real]
    # A remembered value is used as is (so a resumed campaign never re-reads a multi-GB file) ...
    cache.write_text(json.dumps({k: "remembered" for k in entries}))
    assert provenance.sha256_file(f) == "remembered"
    # ... until the file changes: a new size or mtime is a new key.
    f.write_bytes(b"other weights" * 1000)
    os.utime(f, ns=(1, 1))
    assert provenance.sha256_file(f) == hashlib.sha256(f.read_bytes()).hexdigest()


def test_small_files_are_hashed_without_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NUDGE_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "config.json"
    f.write_text("{}")
    assert provenance.sha256_file(f) == hashlib.sha256(b"{}").hexdigest()
    assert not (tmp_path / "cache").exists()


def test_config_differences_name_each_nested_key():
    stored = {"config": {"n": 4, "seeds": [0], "shard": None}, "family": "qwen3"}
    current = {"config": {"n": 5, "seeds": [0], "extra": 1}, "family": "qwen3"}
    assert manifest_keys.diff_configs(stored, current) == [
        "config.extra: stored nothing, now 1",
        "config.n: stored 4, now 5",
        "config.shard: stored null, now nothing",
    ]
    assert manifest_keys.diff_configs(stored, stored) == []


def test_a_cut_manifest_is_named_by_line_with_the_whole_reason(tmp_path):
    """Not `manifest.json:3: not valid JSON (Unterminated string starting at)`, cut mid-phrase
    (issue 25, case 4): the place is said, once."""
    import pytest

    (tmp_path / "manifest.json").write_text('{\n  "config": {\n    "model": "cut')
    with pytest.raises(manifest.OutputDirError) as caught:
        manifest.read_manifest(tmp_path)
    # line 3: four spaces, "model": and a space, so the string opens at column 14
    assert str(caught.value) == (
        f"{tmp_path / 'manifest.json'}:3: not valid JSON (Unterminated string starting at column 14)"
    )


def test_the_pool_memory_share_is_compared_on_resume_but_not_when_pooling():
    """`config.gpu_memory_utilization` is a work setting (manifest_keys.WORK_KEYS), like
    `config.max_batch_tokens`: a resume or a merge names a change, runs pooled by the stats may
    differ in it."""
    config = {"conditions": ["NT"], "n": 3, "max_batch_tokens": None}
    stored = {"format": 1, "config": {**config, "gpu_memory_utilization": 0.9}}
    now = {"format": 1, "config": {**config, "gpu_memory_utilization": 0.5}}
    differences, _ = manifest_keys.compare_manifests(stored, now)
    assert differences == ["config.gpu_memory_utilization: stored 0.9, now 0.5"]
    assert manifest_keys.experiment_settings(stored) == manifest_keys.experiment_settings(now)
    assert manifest_keys.experiment_settings(stored) == {
        "config.conditions": ["NT"],
        "config.n": 3,
        "format": 1,
    }
