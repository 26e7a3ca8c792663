"""`nudge run --quant-compute`: the manifest records the mode and each format's kernel path,
`nudge verify` replays with them, and a resume with another mode is refused, naming the key."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.tiny_runs import nudge_run_args, run_nudge, run_verify, save_tiny_checkpoint

from nudgeability.models.quant import write_w4a16
from nudgeability.models.testing.tiny_tokenizers import tiny_tokenizer

RUN_ARGS = {"n": 2, "chunk_size": 2, "conditions": "NT,B,empty", "max_new_tokens": "12,6"}


@pytest.fixture(scope="module")
def quantised(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("quant-run")
    plain = save_tiny_checkpoint(root / "plain", "qwen3", close_boost=2.6)
    model = AutoModelForCausalLM.from_pretrained(plain, dtype=torch.float32)
    write_w4a16(model, root / "w4a16", group_size=32, tokenizer=tiny_tokenizer("qwen3"))
    return {"root": root, "plain": plain, "model": root / "w4a16"}


def _run(quantised, out, quant_compute=None):
    return run_nudge(
        nudge_run_args(quantised["model"], out, quant_compute=quant_compute, **RUN_ARGS)
    )


def test_the_manifest_records_mode_and_paths_and_verify_replays_them(quantised):
    out = quantised["root"] / "fused"
    status, err = _run(quantised, out)
    assert status == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["quant_compute"] == "fused"
    recorded = manifest["inputs"]["checkpoint"]["quant_compute"]
    # every linear of the 4-layer tiny qwen3 but lm_head: 7 per layer, all on the fp32 kernel
    assert recorded == {"mode": "fused", "paths": {"w4a16": {"w4a16_simd(fp32)": 28}}}
    status, lines = run_verify(out, "--all")
    assert status == 0 and lines[-1] == "verdict: PASS", lines


def test_resuming_with_another_mode_is_refused_naming_the_key(quantised):
    out = quantised["root"] / "exact"
    status, err = _run(quantised, out, "exact")
    assert status == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"]["checkpoint"]["quant_compute"]["paths"] == {"w4a16": {"exact": 28}}
    status, err = _run(quantised, out, "fused")
    assert status != 0 and "quant_compute" in err


def test_a_bad_mode_or_an_unquantised_model_is_one_line_naming_the_flag(quantised, tmp_path):
    status, err = _run(quantised, tmp_path / "bad", "fast")
    assert (
        status != 0 and "--quant-compute 'fast'" in err and "exact, fused, fused-bf16, dense" in err
    )
    status, err = run_nudge(
        nudge_run_args(quantised["plain"], tmp_path / "plain", quant_compute="exact", **RUN_ARGS)
    )
    assert status != 0 and "--quant-compute exact" in err and "not a quantised checkpoint" in err
