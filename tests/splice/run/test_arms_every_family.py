"""Arms run end to end for every family, the multi-token think-closes (GLM-Z1, ChatML) included.

Each tiny checkpoint's output head is pushed towards its think-close (helpers/tiny_runs.py,
`close_push`), so that some bases close after a few tokens and others never do. Every arm is then
checked against HF `generate` on its full prompt, built here: the with-tool (or oracle) messages,
the family's demonstrations after the system turn, B's reasoning up to the token where the marker
starts (found here by decoding), and the sentence's splice ids.
"""

from __future__ import annotations

import json

import pytest
import torch
from helpers.engine_reference import family_greedy
from helpers.tiny_runs import PAIRS, nudge_run_args, read_records, run_nudge
from transformers import AutoModelForCausalLM, AutoTokenizer

from nudgeability.models.families import get_family
from nudgeability.splice.experiment.conditions import get_condition
from nudgeability.splice.experiment.prompts import prompt_sha256
from nudgeability.splice.experiment.sentences import load_sentences
from nudgeability.splice.tasks import get_task, sample_problems

N, BASE_BUDGET, ARM_BUDGET = 4, 24, 12
# Push strengths picked so that, on the seed-0 draw, some bases close and some do not.
PUSH = {"qwen3": 2.5, "gemma4": 2.0, "glm4": 6.0, "llama": 4.0}


def _prompt(family, task, problem, oracle: bool) -> list[int]:
    messages, tools = task.oracle(problem) if oracle else task.with_tool(problem)
    lead = 1 if messages[0]["role"] == "system" else 0
    messages = messages[:lead] + family.demonstrations(tools) + messages[lead:]
    return family.render(messages, tools=tools, thinking=True)


def _close_start(family, ids: list[int]) -> int | None:
    """The first index k such that the text of ids[:k+1] contains the marker's first character at
    or after the text of ids[:k] — found by decoding growing prefixes."""
    marker = family.think_close_text
    for k in range(len(ids)):
        whole = family.decode(ids[: k + len(family.think_close_ids) + 2])
        pos = whole.find(marker)
        if pos >= 0:
            return next(j for j in range(len(ids)) if len(family.decode(ids[: j + 1])) > pos)
    return None


@pytest.mark.parametrize("arch", sorted(PUSH))
def test_every_family_forks_arms_that_equal_hf_generate(tiny_checkpoint, tmp_path, arch):
    model_dir = tiny_checkpoint(arch, close_push=PUSH[arch])
    out = tmp_path / "out"
    budgets = f"{BASE_BUDGET},{ARM_BUDGET}"
    status, err = run_nudge(nudge_run_args(model_dir, out, n=N, max_new_tokens=budgets))
    assert status == 0, err
    records = read_records(out)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    family = get_family(PAIRS[arch], tokenizer)
    task = get_task("strategyqa")
    problems = {p.id: p for p in sample_problems(task.load(), N, 0)}
    codes = json.loads((out / "manifest.json").read_text())["config"]["conditions"]
    arm_codes = [c for c in codes if get_condition(c).kind == "arm"]
    by_key = {(r["problem_id"], r["condition"]): r for r in records}

    # Which bases closed, read here; arms exist exactly under those.
    closed = {}
    for pid in problems:
        for base in ("B", "oracle_B"):
            record = by_key[(pid, base)]
            closed[(pid, base)] = _close_start(family, record["generated_ids"])
            assert record["boundary"] == closed[(pid, base)]
    assert {b is None for b in closed.values()} == {True, False}, closed  # both paths
    for pid in problems:
        for code in arm_codes:
            parent = get_condition(code).base
            assert ((pid, code) in by_key) == (closed[(pid, parent)] is not None)
    arms = [r for r in records if r["condition"] in arm_codes]
    assert any(get_condition(r["condition"]).base == "B" for r in arms)

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    sentences = load_sentences()
    for arm in arms:
        condition = get_condition(arm["condition"])
        base = by_key[(arm["problem_id"], condition.base)]
        prompt = _prompt(family, task, problems[arm["problem_id"]], condition.oracle)
        assert arm["prompt_sha256"] == prompt_sha256(prompt)
        sentence = sentences.text(arm["sentence_id"]) if arm["sentence_id"] else ""
        splice = family.splice_ids(sentence, sealed=condition.seal)
        ids = prompt + base["generated_ids"][: closed[(arm["problem_id"], condition.base)]]
        generated = family_greedy(model, tokenizer, family, ids + splice, ARM_BUDGET)
        assert arm["generated_ids"] == generated, arm["condition"]
