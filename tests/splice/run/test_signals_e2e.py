"""End to end: `nudge run --consistency-samples 4` stores the uncertainty signals, and
`nudge stats` turns them into the grounded-nudge table, every count checked against the records.

References from outside the code under test: B's token log-probabilities, entropies and hidden
state at the cut from an HF forward over prompt + reasoning; answer keys from the task's yes/no
parser; counts, retained rows and accuracies recomputed here from the raw records.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter

import numpy as np
import pytest
import torch
from helpers.grounding_counts import check_grounding_counts
from helpers.smollm2_streamed import SMOLLM2_STREAMED
from helpers.tiny_runs import nudge_run_args, read_records, run_nudge
from transformers import AutoModelForCausalLM, AutoTokenizer

from nudgeability.models.families import get_family
from nudgeability.splice.tasks import get_task, sample_problems
from nudgeability.splice.tasks.scoring import parse_yes_no

N, K, BASE_BUDGET, ARM_BUDGET = 8, 4, 24, 12


@pytest.fixture(scope="module")
def signal_run(tiny_checkpoint, tmp_path_factory):
    model_dir = tiny_checkpoint("qwen3", close_boost=2.6)
    root = tmp_path_factory.mktemp("signals")
    out, stats = root / "run", root / "stats"
    budgets = f"{BASE_BUDGET},{ARM_BUDGET}"
    argv = nudge_run_args(
        model_dir, out, n=N, conditions="primary", consistency_samples=K, max_new_tokens=budgets
    )
    status, err = run_nudge(argv)
    assert status == 0, err
    graded = _with_planted_answers(out, root / "graded")
    status, err = run_nudge(["stats", graded, "--out", stats, "--n-boot", 200, "--folds", 2])
    assert status == 0, err
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return (
        model_dir,
        out,
        stats,
        read_records(out),
        get_family("qwen3", tokenizer),
        graded,
        argv,
    )


def _with_planted_answers(out, graded):
    """A copy of the run whose NT answers, sample answer keys and closed actions are planted: a
    random tiny model never writes a readable yes/no nor a well-formed call, which would leave
    every s unknown and every accuracy 0."""
    shutil.copytree(out, graded)
    lines = []
    for r in read_records(out):
        number = int(r["problem_id"].encode().hex(), 16)  # fixed per problem, unrelated to the run
        if r["condition"] == "NT":
            r["action"] = {"kind": "SELF", "answer": "yes"}
            r["grade"] = {"em": None, "f1": None, "correct": number % 3 != 0}
        elif r["condition"] in ("B", "conf", "doubt"):
            shift = {"B": 1, "conf": 2, "doubt": 3}[r["condition"]]
            r["action"] = {"kind": ["SELF", "TOOL"][(number >> shift) % 2]}
        elif r["condition"] == "consistency":
            r["signals"] = {"answer_key": ["yes", "no", None][(number >> r["sample"]) % 3]}
        lines.append(json.dumps(r, sort_keys=True))
    (graded / "records.jsonl").write_text("\n".join(lines) + "\n")
    return graded


def test_consistency_samples_are_k_records_per_problem_after_nt(signal_run):
    _, out, _, records, _, _, _ = signal_run
    problems = [p.id for p in sample_problems(get_task("strategyqa").load(), N, 0)]
    samples = [r for r in records if r["condition"] == "consistency"]
    assert len(samples) == N * K
    for pid in problems:
        mine = [r for r in records if r["problem_id"] == pid]
        codes = [r["condition"] for r in mine]
        assert codes[: K + 2] == ["NT"] + ["consistency"] * K + ["B"]
        assert [r["sample"] for r in mine[1 : K + 1]] == list(range(K))
    for r in samples:
        parsed = parse_yes_no(r["action"]["answer"])
        assert r["signals"] == {"answer_key": None if parsed is None else "yes" if parsed else "no"}
        assert r["grade"] is not None  # graded like NT
    # the samples are drawn from distinct streams: not all K copies of one text
    texts = Counter(tuple(r["generated_ids"]) for r in samples)
    assert len(texts) > N
    # no other record carries the new fields
    assert all("sample" not in r for r in records if r["condition"] != "consistency")


def test_a_finished_run_resumes_with_every_part_sound_and_the_same_bytes(signal_run):
    _, out, _, _, _, _, argv = signal_run
    before = (out / "records.jsonl").read_bytes()
    status, err = run_nudge(argv)
    assert status == 0, err
    assert "damaged" not in err  # the consistency part (K records per problem) checks as sound
    assert (out / "records.jsonl").read_bytes() == before


def test_b_signals_equal_an_hf_forward_over_prompt_plus_reasoning(signal_run):
    model_dir, out, _, records, family, _, _ = signal_run
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    task = get_task("strategyqa")
    problems = {p.id: p for p in sample_problems(task.load(), N, 0)}
    checked = 0
    for r in (r for r in records if r["condition"] == "B"):
        if r["boundary"] is None:
            assert "signals" not in r
            continue
        prompt = family.render(*task.with_tool(problems[r["problem_id"]]))
        reasoning = r["generated_ids"][: r["boundary"]]
        ids = torch.tensor([prompt + reasoning])
        with torch.no_grad():
            output = model(ids, output_hidden_states=True)
        signals = r["signals"]
        assert signals["tokens"] == len(reasoning)
        hidden = np.load(out / signals["hidden"]["file"])[signals["hidden"]["row"]]
        want = output.hidden_states[-1][0, -1].numpy()
        assert hidden.dtype == np.float16
        np.testing.assert_allclose(hidden.astype(np.float32), want, atol=3e-3 * np.abs(want).max())
        if reasoning:
            logp = torch.log_softmax(output.logits[0, len(prompt) - 1 : -1].double(), dim=-1)
            chosen = logp[torch.arange(len(reasoning)), torch.tensor(reasoning)]
            entropy = -(logp.exp() * logp).sum(-1)
            assert signals["nll_mean"] == pytest.approx(-chosen.mean().item(), abs=1e-4)
            assert signals["entropy_mean"] == pytest.approx(entropy.mean().item(), abs=1e-4)
            assert signals["entropy_max"] == pytest.approx(entropy.max().item(), abs=1e-4)
        checked += 1
    assert checked >= 2


def test_stats_grounding_table_counts_match_the_records(signal_run):
    _, _, stats, _, _, graded, _ = signal_run
    problems = [p.id for p in sample_problems(get_task("strategyqa").load(), N, 0)]
    summary, retained, s = check_grounding_counts(read_records(graded), stats, problems, K)
    assert len(retained) >= 2  # the check is not vacuous
    assert 0 < sum(s[p] == 1 for p in retained) < len(retained)
    assert any(summary["policies"][n]["accuracy"] > 0 for n in ("B", "conf", "doubt"))


def test_report_draws_the_grounding_figures_from_the_stats_directory(signal_run, tmp_path):
    _, _, stats, _, _, _, _ = signal_run
    status, err = run_nudge(["report", stats, "--out", tmp_path])
    assert status == 0, err
    for stem in ("grounding_accuracy", "grounding_roc"):
        for fmt in ("png", "pdf"):
            assert (tmp_path / f"{stem}.{fmt}").stat().st_size > 1000


@pytest.mark.slow
def test_smollm2_strategyqa_with_consistency_samples_gives_the_grounding_table(
    smollm2_streamed_run, tmp_path
):
    """The embedded SmolLM2 with consistency samples (the session's streamed run,
    helpers/smollm2_streamed.py), then `nudge stats`; every count checked. The grounded arms need
    only conf and doubt, the counts are the same sums at any K (K = 4 runs on the tiny model above)
    and read no bootstrap draw, and SmolLM2 answers in NT and closes B's thinking on both problems
    (rows the table retains)."""
    out, stats = smollm2_streamed_run, tmp_path / "stats"
    n, k = SMOLLM2_STREAMED["n"], SMOLLM2_STREAMED["consistency_samples"]
    status, err = run_nudge(["stats", out, "--out", stats, "--n-boot", 200])
    assert status == 0, err
    records = read_records(out)
    problems = [p.id for p in sample_problems(get_task("strategyqa").load(), n, 0)]
    assert sum(r["condition"] == "consistency" for r in records) == n * k
    summary, retained, _ = check_grounding_counts(records, stats, problems, k)
    assert set(summary["signals"]) == {
        "entropy_mean",
        "entropy_max",
        "nll_mean",
        "consistency",
        "probe",
    }
    # SmolLM2 closes its thinking on StrategyQA (README), so the table is not empty
    assert len(retained) >= 1
