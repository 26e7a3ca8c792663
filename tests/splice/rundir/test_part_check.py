"""Resume checks what it reuses: a damaged part file costs only its unit, and a checkpoint moved
to another place (same bytes) does not block a resume (issue 12, items 4 and 5). A part is reused
only when its bytes are the ones the run recorded: the seal's sha256 in a finished run, the part
journal's in one that never finished (issue 25, case 1), so a well-formed part of another run, or
one with a field edited, is damaged too.

The reference is an uninterrupted run made in the test; every resumed run must give its
records.jsonl byte for byte, and a finished run its manifest (the seal) too.
"""

from __future__ import annotations

import json
import shutil

import pytest
from helpers.tiny_runs import nudge_run_args, run_nudge

from nudgeability.splice.rundir.manifest import manifest_text
from nudgeability.splice.rundir.store import WorkStore


@pytest.fixture(scope="module")
def whole(tiny_checkpoint, tmp_path_factory):
    model_dir = tiny_checkpoint("qwen3", close_boost=2.6)
    out = tmp_path_factory.mktemp("resume-checks") / "whole"
    status, err = run_nudge([*_args(model_dir), "--out", out])
    assert status == 0, err
    return model_dir, out


def _args(model_dir, max_new_tokens: str = "16,8") -> list:
    return nudge_run_args(
        model_dir, n=3, chunk_size=1, conditions="primary", max_new_tokens=max_new_tokens
    )


@pytest.fixture(scope="module")
def other_budget(whole, tmp_path_factory):
    """A run of the same model and task with other budgets: its parts have the same unit names."""
    model_dir, _ = whole
    out = tmp_path_factory.mktemp("resume-other") / "other"
    status, err = run_nudge([*_args(model_dir, "12,8"), "--out", out])
    assert status == 0, err
    return out


def _foreign_part(whole_dir, other_dir) -> str:
    """A part name whose bytes differ between the two runs (a part that would pass for its unit)."""
    for part in sorted((whole_dir / "parts").glob("*.jsonl")):
        foreign = other_dir / "parts" / part.name
        if part.stat().st_size and foreign.read_bytes() != part.read_bytes():
            return part.name
    raise AssertionError("the two budgets gave the same parts")


def _edit_one_field(path) -> None:
    """Change one field of the part's first record, keeping the line valid JSON as written."""
    lines = path.read_text(encoding="utf-8").split("\n")
    record = json.loads(lines[0])
    record["prompt_tokens"] += 1
    lines[0] = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    path.write_text("\n".join(lines), encoding="utf-8")


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

    warning, _ = _resume_after(whole, tmp_path, "NT-s0-c00000.jsonl", swap)
    # said as such (issue 25, case 6), not only as records missing
    assert (
        "it holds 1 record(s) of another unit" in warning and "instead of 1 of its own" in warning
    )


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
    from nudgeability.splice.rundir.manifest_keys import compare_manifests

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


def test_a_foreign_part_of_the_same_unit_in_a_finished_run_is_recomputed(
    whole, other_budget, tmp_path
):
    name = _foreign_part(whole[1], other_budget)

    def swap(path):
        shutil.copyfile(other_budget / "parts" / name, path)

    warning, out = _resume_after(whole, tmp_path, name, swap)
    assert "not the bytes this run wrote" in warning, warning
    # the seal is the original's: the foreign part's hash is sealed nowhere
    assert (out / "manifest.json").read_bytes() == (whole[1] / "manifest.json").read_bytes()
    set_aside = list((out / "damaged").iterdir())
    assert [p.read_bytes() for p in set_aside] == [(other_budget / "parts" / name).read_bytes()]


def test_a_part_with_one_field_edited_in_a_finished_run_is_recomputed(whole, tmp_path):
    warning, out = _resume_after(whole, tmp_path, "NT-s0-c00001.jsonl", _edit_one_field)
    assert "not the bytes this run wrote" in warning, warning
    assert (out / "manifest.json").read_bytes() == (whole[1] / "manifest.json").read_bytes()


def _unfinished_copy(whole, tmp_path, monkeypatch):
    """The run of `whole` made anew and stopped just before its seal: parts and journal, no seal."""
    model_dir, _ = whole
    out = tmp_path / "unfinished"

    def killed(self, *args):
        raise KeyboardInterrupt("stopped before the seal")

    with monkeypatch.context() as patch:
        patch.setattr(WorkStore, "seal", killed)
        status, err = run_nudge([*_args(model_dir), "--out", out])
    assert status == 130, err  # as a Ctrl-C just before the seal would leave it
    assert "seal" not in json.loads((out / "manifest.json").read_text())
    assert (out / "part_hashes.jsonl").is_file()
    (out / "records.jsonl").unlink()
    return out


@pytest.mark.parametrize("damage", ["foreign", "edited"])
def test_an_unfinished_run_checks_its_parts_against_the_part_journal(
    whole, other_budget, tmp_path, monkeypatch, damage
):
    model_dir, whole_dir = whole
    out = _unfinished_copy(whole, tmp_path, monkeypatch)
    name = _foreign_part(whole_dir, other_budget) if damage == "foreign" else "NT-s0-c00001.jsonl"
    path = out / "parts" / name
    if damage == "foreign":
        shutil.copyfile(other_budget / "parts" / name, path)
    else:
        _edit_one_field(path)
    status, err = run_nudge([*_args(model_dir), "--out", out])
    assert status == 0, err
    warnings = [line for line in err.splitlines() if str(path) in line]
    assert len(warnings) == 1 and "not the bytes this run wrote" in warnings[0], err
    assert "(1 units computed" in err, err
    assert (out / "records.jsonl").read_bytes() == (whole_dir / "records.jsonl").read_bytes()
    assert (out / "manifest.json").read_bytes() == (whole_dir / "manifest.json").read_bytes()
    assert not (out / "part_hashes.jsonl").exists()  # the seal holds its hashes now


def test_a_part_no_hash_was_recorded_for_is_recomputed(whole, tmp_path):
    """A part file dropped into parts/ under a name of the plan, in a run whose seal lists it no
    longer (its entry removed): unverified bytes are never reused, nor sealed."""
    model_dir, whole_dir = whole
    out = tmp_path / "run"
    shutil.copytree(whole_dir, out)
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["seal"]["parts"]["NT-s0-c00002.jsonl"]
    (out / "manifest.json").write_text(manifest_text(manifest) + "\n", encoding="utf-8")
    status, err = run_nudge([*_args(model_dir), "--out", out])
    assert status == 0, err
    assert "NT-s0-c00002.jsonl: damaged part (no sha256 was recorded for it" in err, err
    assert (out / "manifest.json").read_bytes() == (whole_dir / "manifest.json").read_bytes()


def test_units_built_on_a_base_computed_again_with_other_bytes_are_recomputed(whole, tmp_path):
    """The seal says B-s0-c00000 held other bytes than a recomputation gives (as when a server
    answered differently the first time): the arms forked from the old B are not reused."""
    model_dir, whole_dir = whole
    out = tmp_path / "run"
    shutil.copytree(whole_dir, out)
    (out / "records.jsonl").unlink()
    (out / "parts" / "B-s0-c00000.jsonl").unlink()
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["seal"]["parts"]["B-s0-c00000.jsonl"] = "0" * 64
    (out / "manifest.json").write_text(manifest_text(manifest) + "\n", encoding="utf-8")
    status, err = run_nudge([*_args(model_dir), "--out", out])
    assert status == 0, err
    arms = out / "parts" / "arms-s0-c00000.jsonl"
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and f"{arms}: built on B-s0-c00000" in warnings[0], err
    assert "(2 units computed" in err, err  # B and the arms built on it
    assert [p.name for p in (out / "damaged").iterdir()] == ["arms-s0-c00000.1.jsonl"]
    assert (out / "records.jsonl").read_bytes() == (whole_dir / "records.jsonl").read_bytes()
    assert (out / "manifest.json").read_bytes() == (whole_dir / "manifest.json").read_bytes()
