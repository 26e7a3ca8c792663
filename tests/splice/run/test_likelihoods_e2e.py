"""End to end: `nudge run --likelihoods` records each arm's splice log-probabilities and, on sealed
arms (and those `--score-openers` names), P(TOOL) and P(answer) after the think-close; without
the flag the records are the same bytes less that field; `nudge verify` replays them.

References from outside the code under test: an HF forward of prompt + reasoning + splice (+ an
opener) over the stored checkpoint, log-softmaxed and gathered here; the openers spelled here from
the Qwen3 format (`\\n\\n<tool_call>`, `\\n\\nAnswer:`).
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from helpers.tiny_runs import nudge_run_args, read_records, run_nudge
from transformers import AutoModelForCausalLM, AutoTokenizer

from nudgeability.models.families import get_family
from nudgeability.splice.experiment.conditions import get_condition
from nudgeability.splice.experiment.prompts import render
from nudgeability.splice.experiment.sentences import load_sentences
from nudgeability.splice.tasks import get_task, sample_problems

N = 6
# with the empty arm every arm borrows the prefix's last token; without it, the fork keeps the
# prefix's last hidden state (engine/suffix_scores.py): both paths, each against HF
CONDITIONS = {
    "with-empty": "primary,sealed",
    "without-empty": "NT,B,doubt,sealed_conf,sealed_doubt",
}


@pytest.fixture(scope="module", params=sorted(CONDITIONS))
def runs(request, tiny_checkpoint, tmp_path_factory):
    model_dir = tiny_checkpoint("qwen3", close_boost=2.6)
    root = tmp_path_factory.mktemp("likelihoods")
    conditions = CONDITIONS[request.param]
    common = dict(n=N, conditions=conditions, max_new_tokens="24,8")
    on = nudge_run_args(model_dir, root / "on", likelihoods=True, score_openers="doubt", **common)
    off = nudge_run_args(model_dir, root / "off", **common)
    for argv in (on, off):
        status, err = run_nudge(argv)
        assert status == 0, err
    return model_dir, root / "on", root / "off"


def _hf_logprobs(model, context: list[int], scored: list[int], start=None) -> list[float]:
    """log p(scored[j] | context + scored[:j]) from HF's forward. `start` (`_hf_start`): HF's
    forward over a leading part of `context`, which this one continues from a copy of its KV
    cache: a base's prompt and reasoning are computed once for all its arms."""
    if not scored:
        return []
    head, last, cache = start if start is not None else ([], None, None)
    assert context[: len(head)] == head
    ids = torch.tensor([context[len(head) :] + scored])
    with torch.no_grad():
        logits = model(ids, cache=copy.deepcopy(cache)).logits[0]
    if last is not None:  # the prediction of the first token after the head
        logits = torch.cat([last, logits])
    logp = torch.log_softmax(logits.float(), dim=-1)
    offset = len(context) - len(head) - (last is None)
    return [logp[offset + j, t].item() for j, t in enumerate(scored)]


def _hf_start(model, head: list[int]):
    """HF's forward over `head`: (head, its last logits, its KV cache), for `_hf_logprobs`."""
    with torch.no_grad():
        out = model(torch.tensor([head]), use_cache=True)
    return head, out.logits[0, -1:], out.cache


def test_without_the_flag_the_records_are_those_bytes_less_the_likelihoods(runs):
    _, on, off = runs
    stripped = []
    for line in (on / "records.jsonl").read_text().splitlines():
        data = json.loads(line)
        data.pop("likelihoods", None)
        stripped.append(json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":")))
    assert "\n".join(stripped) + "\n" == (off / "records.jsonl").read_text()
    assert all("likelihoods" not in r for r in read_records(off))
    manifest = json.loads((off / "manifest.json").read_text())
    assert "likelihoods" not in manifest["config"] and "score_openers" not in manifest["config"]


def test_likelihoods_equal_an_hf_teacher_forced_forward(runs):
    model_dir, on, _ = runs
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    family = get_family("qwen3", AutoTokenizer.from_pretrained(model_dir))
    arms, openers = _check_against_hf(model, family, read_records(on), N, "\n\n", ("doubt",))
    assert arms >= 6 and openers >= 3  # not vacuous: bases closed their thinking


def _check_against_hf(model, family, records, n, gap, scored_open) -> tuple[int, int]:
    """Every arm's likelihoods against HF over the StrategyQA with-tool prompt (as rendered for
    the run), its base's reasoning and its splice; (arms, arms with openers) checked."""
    task, sentences = get_task("strategyqa"), load_sentences(None)
    problems = {p.id: p for p in sample_problems(task.load(), n, 0)}
    bases = {r["problem_id"]: r for r in records if r["condition"] == "B"}
    starts = {}  # problem -> HF's forward over its prompt and B's reasoning
    tool_opener = family.encode(gap + "<tool_call>")
    answer_opener = family.encode(gap + "Answer:")
    arms = openers = 0
    for r in records:
        condition = get_condition(r["condition"])
        if condition.kind != "arm":
            assert "likelihoods" not in r
            continue
        base = bases[r["problem_id"]]
        prompt = render(family, *task.with_tool(problems[r["problem_id"]]))
        context = prompt + base["generated_ids"][: base["boundary"]]
        sentence = sentences.text(r["sentence_id"]) if r["sentence_id"] else ""
        splice = family.splice_ids(sentence, condition.seal)
        got = r["likelihoods"]
        if r["problem_id"] not in starts:
            starts[r["problem_id"]] = _hf_start(model, context)
        start = starts[r["problem_id"]]
        want = _hf_logprobs(model, context, splice, start)
        assert got["splice_logprobs"] == pytest.approx(want, abs=1e-4)
        assert got["splice_logprob"] == pytest.approx(sum(want), abs=1e-3)
        arms += 1
        if not (condition.seal or r["condition"] in scored_open):
            assert got["tool_opener_logprob"] is None and got["answer_opener_logprob"] is None
            continue
        closed = context + splice + ([] if condition.seal else family.think_close_ids)
        tool = sum(_hf_logprobs(model, closed, tool_opener, start))
        answer = sum(_hf_logprobs(model, closed, answer_opener, start))
        assert got["tool_opener_logprob"] == pytest.approx(tool, abs=1e-4)
        assert got["answer_opener_logprob"] == pytest.approx(answer, abs=1e-4)
        assert math.exp(got["tool_opener_logprob"]) + math.exp(got["answer_opener_logprob"]) <= 1
        openers += 1
    return arms, openers


def test_verify_replays_the_likelihoods_and_a_rerun_resumes_to_the_same_bytes(runs, tmp_path):
    _, on, _ = runs
    status, err = run_nudge(["verify", on, "--all"])
    assert status == 0, err
    before = (on / "records.jsonl").read_bytes()
    manifest = json.loads((on / "manifest.json").read_text())
    assert manifest["config"]["likelihoods"] is True
    argv = nudge_run_args(
        manifest["config"]["model"],
        on,
        n=N,
        conditions=",".join(manifest["config"]["conditions"]),
        max_new_tokens="24,8",
        likelihoods=True,
        score_openers="doubt",
    )
    status, err = run_nudge(argv)
    assert status == 0, err
    assert (on / "records.jsonl").read_bytes() == before
    if "conf" in manifest["config"]["conditions"]:  # the stats need the primary pair
        status, err = run_nudge(["stats", on, "--out", tmp_path / "stats", "--n-boot", 50])
        assert status == 0, err  # they read records that carry likelihoods


@pytest.mark.slow
def test_smollm2_records_its_likelihoods_as_hf_scores_them(smollm2, tmp_path):
    """The demo model through `nudge run --likelihoods` (ChatML: the openers after `\n`). A base
    budget of 24 tokens closes B's thinking on one of the first two problems at least
    (tests/splice/audit/test_verify_smollm2.py), which is all the likelihoods need: the arms'
    own generations are not scored."""
    out = tmp_path / "run"
    conditions = "NT,B,empty,doubt,sealed_conf,sealed_doubt"
    argv = nudge_run_args(
        out=out, n=2, conditions=conditions, likelihoods=True, max_new_tokens="24,4"
    )
    status, err = run_nudge(argv)
    assert status == 0, err
    family = get_family("chatml", smollm2.tokenizer)
    arms, openers = _check_against_hf(smollm2.model, family, read_records(out), 2, "\n", ())
    assert arms >= 4 and openers >= 2  # SmolLM2 closes its thinking on StrategyQA (README)
