"""The real SmolLM2-135M-Instruct: 3 problems × every condition run through `nudge run` and write
their records and a manifest that hashes the embedded GGUF and the converted checkpoint."""

from __future__ import annotations

import hashlib
import json

import pytest
from helpers.tiny_runs import GREEDY_STRATEGYQA, nudge_run_args, read_records, run_nudge
from transformers import AutoTokenizer

from nudgeability.models.smollm2 import converted_dir, find_gguf

pytestmark = pytest.mark.slow

ARMS_OF_B, ARMS_OF_ORACLE = 12, 2


def test_smollm2_runs_three_problems_with_every_condition(tmp_path):
    out = tmp_path / "smollm2"
    status, err = run_nudge(nudge_run_args(out=out, n=3, max_new_tokens="24,12"))
    assert status == 0, err
    records = read_records(out)
    bases = {
        (r["problem_id"], r["condition"]): r
        for r in records
        if r["condition"] in ("NT", "B", "oracle_B")
    }
    assert len(bases) == 9
    closed_b = sum(bases[(p, "B")]["boundary"] is not None for p, c in bases if c == "B")
    closed_o = sum(
        bases[(p, "oracle_B")]["boundary"] is not None for p, c in bases if c == "oracle_B"
    )
    assert len(records) == 9 + ARMS_OF_B * closed_b + ARMS_OF_ORACLE * closed_o
    tokenizer = AutoTokenizer.from_pretrained(converted_dir(find_gguf()))
    for (_, condition), r in bases.items():
        if condition == "NT":
            continue  # NT is no splice base: its record carries no boundary
        ids, b = r["generated_ids"], r["boundary"]
        if b is None:
            assert "</think>" not in r["text"]
        else:  # the cut is before SmolLM2's multi-token `</think>` (`</`, `think`, `>`)
            assert "</think>" not in tokenizer.decode(ids[:b]) and "</think>" in tokenizer.decode(
                ids[: b + 4]
            )
    print(
        f"\nSmolLM2 greedy, 24/12 tokens: B closed {closed_b}/3, oracle_B closed {closed_o}/3, "
        f"{len(records)} records; actions: {sorted(r['action']['kind'] for r in records)}"
    )

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["experiment"] == {"model": "smollm2", **GREEDY_STRATEGYQA}
    assert manifest["family"] == "chatml"
    gguf = find_gguf()
    assert (
        manifest["inputs"]["checkpoint"]["gguf"]["sha256"]
        == hashlib.sha256(gguf.read_bytes()).hexdigest()
    )
    weights = converted_dir(gguf) / "model.safetensors"
    files = manifest["inputs"]["checkpoint"]["files"]
    assert files["model.safetensors"] == hashlib.sha256(weights.read_bytes()).hexdigest()
