"""`nudge bench` writes its JSON and plot with the memory floor worked out by hand; `--threads`
sets torch's thread count and is recorded by `nudge bench` and `nudge run`."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.tiny_runs import nudge_run_args, run_nudge
from transformers import AutoModelForCausalLM

ARGS = ["--prefix", "40", "--new", "4", "--threads", "1", "--quiet"]


@pytest.fixture
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_bench_writes_every_point_with_the_floor_worked_by_hand(
    tiny_checkpoint, tmp_path, keep_threads
):
    model_dir = tiny_checkpoint("llama")
    out = tmp_path / "bench.json"
    argv = ["bench", "--model", model_dir, "--device", "cpu", "--arms", "1,3", *ARGS]
    status, err = run_nudge([*argv, "--out", out])
    assert status == 0, err
    result = json.loads(out.read_text())
    assert (tmp_path / "bench.png").stat().st_size > 0
    assert result["meta"]["threads"] == 1 and result["meta"]["dtype"] == "float32"
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    cfg = model.config
    tensors = [*model.parameters(), *model.buffers()]  # buffers: RoPE's inverse frequencies
    weights = sum({t.data_ptr(): t.numel() * t.element_size() for t in tensors}.values())
    per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 4
    assert [(p["arms"], p["prefix"], p["new"]) for p in result["points"]] == [
        (1, 40, 4),
        (3, 40, 4),
    ]
    for point in result["points"]:
        # the workload's suffixes are 10 + 13 i mod 21 tokens long: 10, 23, 15
        longest = max(10 + (13 * i) % 21 for i in range(point["arms"]))
        slots = 40 + point["arms"] * (longest + 4 - 1)
        assert point["floor_bytes"] == weights + per_token * slots
        assert point["arms_per_s"] == pytest.approx(point["arms"] / point["wall_s"])
        assert point["baseline_ratio"] is None


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--arms", "0,4", "--arms '0,4': expected positive integers, comma-separated"),
        ("--prefix", "x", "--prefix 'x': expected positive integers, comma-separated"),
        ("--threads", "0", "--threads 0: must be a positive integer"),
    ],
)
def test_bad_bench_flags_fail_in_one_line(flag, value, message, keep_threads):
    status, err = run_nudge(["bench", flag, value])
    assert status == 2
    assert err.strip() == f"nudge bench: error: {message}"


def test_run_records_its_thread_count_in_the_manifest_and_timings(
    tiny_checkpoint, tmp_path, keep_threads
):
    model_dir = tiny_checkpoint("qwen3", close_boost=2.6)
    out = tmp_path / "out"
    argv = nudge_run_args(model_dir, out, n=2, max_new_tokens="8,4", threads=1, quiet=False)
    status, err = run_nudge(argv)
    assert status == 0, err
    assert torch.get_num_threads() == 1
    assert json.loads((out / "manifest.json").read_text())["threads"] == 1
    timings = [json.loads(line) for line in (out / "timings.jsonl").read_text().splitlines()]
    assert timings and all(t["threads"] == 1 for t in timings)


@pytest.mark.slow
def test_bench_baseline_on_smollm2_gives_hf_generate_tokens(tmp_path, keep_threads):
    out = tmp_path / "bench.json"
    status, err = run_nudge(["bench", "--arms", "2", "--baseline", "--out", out, *ARGS])
    assert status == 0, err
    (point,) = json.loads(out.read_text())["points"]
    assert point["baseline_same_tokens"] == 2
    assert point["baseline_ratio"] == pytest.approx(point["baseline_s"] / point["wall_s"])
