"""The same config gives byte-identical records, greedy or sampled; sampled seeds are replicates."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers.tiny_runs import manifest_without_commit, nudge_run_args, read_records, run_nudge

from nudgeability.splice.tasks import get_task, sample_problems

PRIMARY = ("NT", "B", "empty", "conf", "doubt", "neutral")


def _run(model_dir, out, *extra) -> bytes:
    args = nudge_run_args(model_dir, out, n=2, chunk_size=2, conditions="primary")
    status, err = run_nudge([*args, *extra])
    assert status == 0, err
    return (out / "records.jsonl").read_bytes()


@pytest.mark.parametrize(
    "decoding,extra",
    [("greedy", []), ("sampled", ["--seeds", "0,1"]), ("greedy", ["--max-batch-tokens", "1500"])],
)  # split batches
def test_two_runs_of_one_config_write_identical_records(tiny_checkpoint, tmp_path, decoding, extra):
    model_dir = tiny_checkpoint("qwen3", close_boost=2.6)
    extra = ["--decoding", decoding, *extra]
    first = _run(model_dir, tmp_path / "a", *extra)
    second = _run(model_dir, tmp_path / "b", *extra)
    assert first == second
    assert manifest_without_commit(tmp_path / "a") == manifest_without_commit(tmp_path / "b")


def test_sampled_seeds_are_full_replicates_with_their_own_streams(tiny_checkpoint, tmp_path):
    model_dir = tiny_checkpoint("qwen3", close_boost=2.6)
    _run(model_dir, tmp_path / "s", "--decoding", "sampled", "--seeds", "0,1")
    records = read_records(tmp_path / "s")
    bases = Counter((r["seed"], r["condition"]) for r in records if r["condition"] in ("NT", "B"))
    assert bases == {(0, "NT"): 2, (0, "B"): 2, (1, "NT"): 2, (1, "B"): 2}
    by_seed = {
        seed: [r["generated_ids"] for r in records if r["seed"] == seed and r["condition"] == "NT"]
        for seed in (0, 1)
    }
    assert by_seed[0] != by_seed[1]  # seed 1 is not a copy of seed 0
    # canonical order: drawn problem, then condition, then seed
    problems = [p.id for p in sample_problems(get_task("strategyqa").load(), 2, 0)]
    keys = [(r["problem_id"], r["condition"], r["seed"]) for r in records]
    assert keys == sorted(keys, key=lambda k: (problems.index(k[0]), PRIMARY.index(k[1]), k[2]))
