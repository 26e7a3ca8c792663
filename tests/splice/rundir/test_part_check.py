"""Resume checks what it reuses: a damaged part file costs only its unit, and a checkpoint moved
to another place (same bytes) does not block a resume (issue 12, items 4 and 5).

The reference is an uninterrupted run made in the test; every resumed run must give its
records.jsonl byte for byte.
"""

from __future__ import annotations

import shutil

import pytest
from helpers.tiny_runs import nudge_run_args, run_nudge


@pytest.fixture(scope="module")
def whole(tiny_checkpoint, tmp_path_factory):
    model_dir = tiny_checkpoint("qwen3", close_boost=2.6)
    out = tmp_path_factory.mktemp("resume-checks") / "whole"
    status, err = run_nudge([*_args(model_dir), "--out", out])
    assert status == 0, err
    return model_dir, out


def _args(model_dir) -> list:
    return nudge_run_args(model_dir, n=3, chunk_size=1, conditions="primary")


def _damaged_copy(whole_dir, tmp_path, part: str, damage) -> tuple:
    out = tmp_path / "run"
    shutil.copytree(whole_dir, out)
    (out / "records.jsonl").unlink()
    path = out / "parts" / part
    damage(path)
    return out, path


def _resume_after(whole, tmp_path, part, damage):
    model_dir, whole_dir = whole
    out, path = _damaged_copy(whole_dir, tmp_path, part, damage)
    status, err = run_nudge([*_args(model_dir), "--out", out])
    assert status == 0, err
    assert (out / "records.jsonl").read_bytes() == (whole_dir / "records.jsonl").read_bytes()
    warnings = [line for line in err.splitlines() if str(path) in line]
    assert len(warnings) == 1, err
    assert "Traceback" not in err
    assert "(1 units computed" in err, err  # only the damaged unit
    return warnings[0], out


def _arm_part_with_records(whole_dir) -> str:
    parts = sorted(p for p in (whole_dir / "parts").glob("arms-*.jsonl") if p.stat().st_size)
    assert parts, "the fixture run made no arms"
    return parts[0].name


def test_an_empty_base_part_is_set_aside_and_recomputed(whole, tmp_path):
    warning, out = _resume_after(whole, tmp_path, "B-s0-c00001.jsonl", lambda p: p.write_bytes(b""))
    assert "B-s0-c00001" in warning
    set_aside = [
        p for p in out.rglob("*B-s0-c00001*") if p.parent.name not in ("parts", "signals")
    ]  # signals: B's hidden states
    assert len(set_aside) == 1 and set_aside[0].read_bytes() == b"", set_aside


def test_a_part_truncated_mid_line_is_set_aside_and_recomputed(whole, tmp_path):
    name = _arm_part_with_records(whole[1])

    def truncate(path):
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])

    warning, _ = _resume_after(whole, tmp_path, name, truncate)
    assert name.removesuffix(".jsonl") in warning


def test_an_arm_part_emptied_is_caught_from_its_base(whole, tmp_path):
    name = _arm_part_with_records(whole[1])
    _resume_after(whole, tmp_path, name, lambda p: p.write_bytes(b""))


def test_a_part_with_a_foreign_record_is_caught(whole, tmp_path):
    def swap(path):
        other = path.parent / "NT-s0-c00002.jsonl"
        path.write_bytes(other.read_bytes())

    _resume_after(whole, tmp_path, "NT-s0-c00000.jsonl", swap)


def test_a_checkpoint_moved_elsewhere_does_not_block_a_resume(whole, tmp_path):
    model_dir, whole_dir = whole
    moved = shutil.copytree(model_dir, tmp_path / "elsewhere" / "model")
    out = tmp_path / "run"
    shutil.copytree(whole_dir, out)
    status, err = run_nudge([*_args(moved), "--out", out])
    assert status == 0, err
    assert "(0 units computed" in err, err
    assert (out / "records.jsonl").read_bytes() == (whole_dir / "records.jsonl").read_bytes()


def test_a_checkpoint_with_other_bytes_still_blocks_a_resume(whole, tmp_path):
    model_dir, whole_dir = whole
    moved = shutil.copytree(model_dir, tmp_path / "elsewhere" / "model")
    with (moved / "config.json").open("a") as handle:
        handle.write("\n")
    out = tmp_path / "run"
    shutil.copytree(whole_dir, out)
    status, err = run_nudge([*_args(moved), "--out", out])
    assert status == 2, err
    assert "inputs.checkpoint.files.config.json" in err, err


def test_shards_whose_checkpoint_or_cache_location_differs_still_merge():
    from nudgeability.splice.rundir.manifest import compare_manifests

    def manifest(directory: str, sha: str) -> dict:
        return {
            "config": {"model": directory, "data": "/d/x.json", "n": 3},
            "inputs": {
                "checkpoint": {"directory": directory, "files": {"model.safetensors": sha}},
                "data": {"path": "/d/x.json", "sha256": "d"},
            },
            "versions": {"torch": "2.13"},
        }

    assert compare_manifests(manifest("/cache-a/m", "s1"), manifest("/cache-b/m", "s1")) == ([], [])
    differences, _ = compare_manifests(manifest("/cache-a/m", "s1"), manifest("/cache-b/m", "s2"))
    assert differences == ['inputs.checkpoint.files.model.safetensors: stored "s1", now "s2"']
