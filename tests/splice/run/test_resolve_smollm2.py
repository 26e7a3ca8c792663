"""`nudge run --resolve` on the real SmolLM2-135M-Instruct (the session's streamed run,
helpers/smollm2_streamed.py): it calls its tools on StrategyQA, each TOOL record gets one
resolution, and a resolution equals HF `generate` on its full prompt alone.

The full prompt is rebuilt here from the stored records: the rendered prompt (checked against the
base record's hash), the base's reasoning,
the arm's splice and generation cut where the call's `</tool_call>` ends (SmolLM2 spells it with
several tokens, so the cut may fall inside a token, whose call text is then re-encoded), then the
ChatML tool turn written out by hand and the family's assistant header with its `<think>`.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from helpers.engine_reference import hf_greedy
from helpers.smollm2_streamed import SMOLLM2_STREAMED
from helpers.tiny_runs import read_records
from transformers import AutoModelForCausalLM, AutoTokenizer

from nudgeability.models.families import Family, get_family
from nudgeability.models.smollm2 import converted_dir, find_gguf
from nudgeability.splice.experiment.prompts import render
from nudgeability.splice.experiment.sentences import load_sentences
from nudgeability.splice.tasks import get_task, sample_problems
from nudgeability.splice.tasks.tools import SearchIndex

pytestmark = pytest.mark.slow
if not hasattr(Family, "continuation_ids"):  # the families' tool-result turns (issue 14, item 3)
    pytest.skip("needs Family.continuation_ids (the tool-result turns)", allow_module_level=True)

N, ARM_BUDGET = SMOLLM2_STREAMED["n"], SMOLLM2_STREAMED["max_new_tokens_arm"]
SENTENCES = {"conf": "first.confidence", "doubt": "first.doubt"}
SENTENCES |= {"oracle_" + k: v for k, v in SENTENCES.items()}
CLOSE = "</tool_call>"


def _cut_after_call(tokenizer, ids: list[int]) -> tuple[list[int], str]:
    """(whole tokens up to the call's end, the call text inside the next token)."""
    text = ""
    for k, token in enumerate(ids):
        piece = tokenizer.decode([token], skip_special_tokens=False)
        if CLOSE in text + piece:
            end = (text + piece).index(CLOSE) + len(CLOSE)
            return ids[:k], (text + piece)[len(text) : end]
        text += piece
    raise AssertionError("no complete call")


def test_smollm2_resolutions(smollm2_streamed_run):
    out = smollm2_streamed_run
    records = read_records(out)
    tool_keys = [
        (r["problem_id"], r["condition"]) for r in records if r["action"]["kind"] == "TOOL"
    ]
    lines = (out / "resolutions.jsonl").read_text(encoding="utf-8").split("\n")[:-1]
    resolutions = [json.loads(line) for line in lines]
    assert tool_keys, "SmolLM2 follows the demonstrated call format on StrategyQA"
    assert [(r["problem_id"], r["condition"]) for r in resolutions] == tool_keys

    tokenizer = AutoTokenizer.from_pretrained(converted_dir(find_gguf()))
    family = get_family("chatml", tokenizer)
    model = AutoModelForCausalLM.from_pretrained(converted_dir(find_gguf()), dtype=torch.float32)
    task = get_task("strategyqa")
    problems = {p.id: p for p in sample_problems(task.load(), N, 0)}
    by_key = {(r["problem_id"], r["condition"]): r for r in records}
    index = SearchIndex.from_file(task.default_data_path())
    sentences = load_sentences()
    checked = 0
    for resolution in resolutions:
        if not resolution["executed"] or checked == 3:
            continue
        problem = problems[resolution["problem_id"]]
        code = resolution["condition"]
        base_code = "oracle_B" if code.startswith("oracle") else "B"
        base, source = by_key[(problem.id, base_code)], by_key[(problem.id, code)]
        arguments = source["action"]["arguments"]
        if resolution["tool_name"] == "search":
            result = index.search(arguments["query"])
        else:
            result = f"The answer is {'yes' if problem.gold else 'no'}."
        assert resolution["result_sha256"] == hashlib.sha256(result.encode()).hexdigest()
        # the with-tool prompt with the ChatML family's demonstrations, as the run renders it;
        # the base record's hash says it is the prompt the run used
        prompt = render(
            family, *(task.oracle(problem) if base_code == "oracle_B" else task.with_tool(problem))
        )
        assert (
            hashlib.sha256(np.asarray(prompt, "<i4").tobytes()).hexdigest()
            == (base["prompt_sha256"])
        )
        if code == base_code:
            after = base["generated_ids"][base["boundary"] :]
        else:
            splice = family.splice_ids(sentences.text(SENTENCES[code]), sealed=False)
            after = splice + source["generated_ids"]
        kept, rest = _cut_after_call(tokenizer, after)
        turn = f"<|im_end|>\n<|im_start|>tool\n{result}<|im_end|>\n<|im_start|>assistant\n<think>\n"
        ids = prompt + base["generated_ids"][: base["boundary"]] + kept
        ids += tokenizer.encode(rest + turn, add_special_tokens=False)
        assert resolution["prompt_tokens"] == len(ids)
        digest = hashlib.sha256(np.asarray(ids, "<i4").tobytes()).hexdigest()
        assert resolution["prompt_sha256"] == digest
        generated = hf_greedy(model, ids, ARM_BUDGET, family.stop_token_ids).tokens
        got = resolution["generated_ids"]
        # the engine also stops at a stop string (HF does not here): its tokens are HF's up to it
        assert got == generated[: len(got)]
        if resolution["finish_reason"] != "stop_string":
            assert got == generated
        checked += 1
    assert checked >= 1
