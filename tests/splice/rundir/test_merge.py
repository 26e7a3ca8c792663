"""`--shard 1/2` + `--shard 2/2`, then `nudge merge`, equals the unsharded run byte for byte;
merge refuses incomplete, missing, repeated or mismatched shards with a one-line error, and a
shard whose files are not the bytes it sealed (issue 25, case 1)."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers.tiny_runs import (
    manifest_without_commit,
    nudge_run_args,
    read_records,
    run_nudge,
    run_verify,
)


@pytest.fixture(scope="module")
def runs(tiny_checkpoint, tmp_path_factory):
    model_dir = tiny_checkpoint("qwen3", close_boost=2.6)
    root = tmp_path_factory.mktemp("shards")
    common = nudge_run_args(model_dir, n=3, chunk_size=1, conditions="primary,oracle")
    for name, extra in (("whole", []), ("s1", ["--shard", "1/2"]), ("s2", ["--shard", "2/2"])):
        status, err = run_nudge([*common, "--out", root / name, *extra])
        assert status == 0, err
    return model_dir, root, common


def test_shards_partition_the_chunks(runs):
    _, root, _ = runs
    problems = [r["problem_id"] for r in read_records(root / "whole") if r["condition"] == "NT"]
    assert [
        r["problem_id"] for r in read_records(root / "s1") if r["condition"] == "NT"
    ] == problems[0::2]
    assert [
        r["problem_id"] for r in read_records(root / "s2") if r["condition"] == "NT"
    ] == problems[1::2]


def test_merged_shards_equal_the_unsharded_run(runs):
    model_dir, root, common = runs
    status, err = run_nudge(["merge", root / "merged", root / "s2", root / "s1"])
    assert status == 0, err
    assert (root / "merged" / "records.jsonl").read_bytes() == (
        root / "whole" / "records.jsonl"
    ).read_bytes()
    assert manifest_without_commit(root / "merged") == manifest_without_commit(root / "whole")
    # the merged directory is sealed with its own records and parts, as the whole run's is
    status, lines = run_verify(root / "merged", "--sample", 0)
    assert status == 0 and lines[2].startswith("integrity: ok"), lines
    # the merged directory is a finished unsharded run: running it again computes nothing
    status, err = run_nudge([*common, "--out", root / "merged"])
    assert status == 0 and "(0 units computed" in err, err
    assert (root / "merged" / "records.jsonl").read_bytes() == (
        root / "whole" / "records.jsonl"
    ).read_bytes()


def _merge_error(out, *dirs) -> str:
    status, err = run_nudge(["merge", out, *dirs])
    assert status == 2 and not out.exists()
    assert err.count("\n") == 1 and err.startswith("nudge merge: error: "), err
    return err


def test_merge_refuses_missing_repeated_incomplete_or_mismatched_shards(runs, tmp_path):
    _, root, _ = runs
    assert "shard(s) 2/2 missing" in _merge_error(tmp_path / "m", root / "s1")
    assert "shard 1/2 is given twice" in _merge_error(
        tmp_path / "m", root / "s1", root / "s1", root / "s2"
    )
    assert "not a shard" in _merge_error(tmp_path / "m", root / "whole", root / "s1")

    unfinished = tmp_path / "unfinished"
    shutil.copytree(root / "s2", unfinished)
    (unfinished / "records.jsonl").unlink()
    err = _merge_error(tmp_path / "m", root / "s1", unfinished)
    assert str(unfinished) in err and "not finished" in err

    other = tmp_path / "other"
    shutil.copytree(root / "s2", other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["config"]["max_new_tokens"] = 99
    (other / "manifest.json").write_text(json.dumps(manifest))
    err = _merge_error(tmp_path / "m", root / "s1", other)
    assert (
        "config.max_new_tokens: shard 1/2 has 16, shard 2/2 has 99" in err
        and str(other / "manifest.json") in err
    )


def test_a_shard_verifies_against_its_own_plan(runs):
    _, root, _ = runs
    status, lines = run_verify(root / "s2", "--all")
    assert status == 0, lines
    parts = sorted(p.stem for p in (root / "s2" / "parts").glob("*.jsonl"))
    assert all(name.endswith("c00001") for name in parts)  # chunk 1 of 0, 1, 2
    assert sorted(lines[3].rsplit(": ", 1)[1].split(", ")) == parts


@pytest.mark.parametrize("damaged", ["parts/NT-s0-c00001.jsonl", "records.jsonl"])
def test_merge_refuses_a_shard_whose_files_differ_from_its_seal(runs, tmp_path, damaged):
    model_dir, root, common = runs
    shard = tmp_path / "s2"
    shutil.copytree(root / "s2", shard)
    path = shard / damaged
    lines = path.read_text(encoding="utf-8").split("\n")
    record = json.loads(lines[0])
    record["prompt_tokens"] += 1  # one field edited, still valid JSON
    lines[0] = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    path.write_text("\n".join(lines), encoding="utf-8")
    err = _merge_error(tmp_path / "m", root / "s1", shard)
    assert str(path) in err and "the manifest recorded" in err, err
    # as the message says: the shard run again mends it, and the merge then equals the whole run
    status, err = run_nudge([*common, "--shard", "2/2", "--out", shard])
    assert status == 0, err
    status, err = run_nudge(["merge", tmp_path / "m", root / "s1", shard])
    assert status == 0, err
    assert (tmp_path / "m" / "records.jsonl").read_bytes() == (
        root / "whole" / "records.jsonl"
    ).read_bytes()


def test_the_merged_manifest_lists_every_shards_fallbacks_once(runs, tmp_path):
    """Shards run on two machines met different fallbacks (util/fallbacks.py, written beside the
    seal and never compared): the merged manifest lists each one once, in shard order, whatever
    order the directories are given in."""
    _, root, _ = runs
    shared = {"path": "static_decode bucket 32", "used": "eager cascade", "reason": "compile"}
    first = {"path": "scaled_mm layers.0.q_proj", "used": "triton_fp8", "reason": "refused"}
    second = {"path": "tinygemm layers.1.o_proj", "used": "triton_w4a16", "reason": "fp16"}
    taken = {"s1": [first, shared], "s2": [shared, second]}
    shards = []
    for name, fallbacks in taken.items():
        shard = tmp_path / name
        shutil.copytree(root / name, shard)
        manifest = json.loads((shard / "manifest.json").read_text())
        assert manifest["fallbacks"] == []  # the tiny runs took none
        manifest["fallbacks"] = fallbacks
        (shard / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
        shards.append(shard)
    status, err = run_nudge(["merge", tmp_path / "m", *reversed(shards)])
    assert status == 0, err
    merged = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert merged["fallbacks"] == [first, shared, second]
    # nothing else in the manifest moved: it is the whole run's but for the fallbacks
    whole = manifest_without_commit(root / "whole")
    assert {k: v for k, v in merged.items() if k not in ("fallbacks", "git_commit")} == {
        k: v for k, v in whole.items() if k != "fallbacks"
    }
