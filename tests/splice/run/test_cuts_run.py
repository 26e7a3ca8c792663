"""`nudge run --cuts`: every arm forked again at extra cuts of its base's reasoning.

Each B record lists its extra cuts, checked here against a rounding of the fractions written in
the test; each arm at a cut equals HF `generate` on its full prompt (the with-tool prompt, B's
ids before the cut, the splice), built here; the records are the same bytes on both schedules and
at any chunking (no arm depends on what is batched beside it); `nudge verify` replays every unit,
and a damaged arms part is recomputed into the same bytes.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from helpers.engine_reference import hf_greedy
from helpers.tiny_runs import nudge_run_args, read_records, run_nudge, run_verify
from transformers import AutoModelForCausalLM, AutoTokenizer

from nudgeability.models.families import get_family
from nudgeability.splice.experiment.sentences import load_sentences
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.prepare import prepare
from nudgeability.splice.run.runner import run

FRACTIONS = (0.3, 0.7)
TINY = dict(
    task="strategyqa",
    n=4,
    max_new_tokens=24,
    max_new_tokens_arm=8,
    device="cpu",
    conditions=("empty", "conf", "doubt"),
    cuts="0.7,0.3",
)


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """One torch thread: the engine's forward is single-threaded anyway."""


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return tiny_checkpoint("qwen3", close_boost=2.6)


def _run(model, out, schedule=None, **config):
    prepared = prepare(RunConfig(model=str(model), **{**TINY, **config}))
    run(prepared, out, progress=False, schedule=schedule)
    return read_records(out)


def test_arms_at_every_cut_equal_hf_generate_on_their_full_prompt(model, tmp_path):
    records = _run(model, tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["config"]["cuts"] == "0.3,0.7"  # the canonical spelling
    tokenizer = AutoTokenizer.from_pretrained(model)
    family = get_family("qwen3", tokenizer)
    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    sentences = load_sentences()
    bases = {r["problem_id"]: r for r in records if r["condition"] == "B"}
    closed = [b for b in bases.values() if b["boundary"] is not None]
    assert closed and any(b["boundary"] >= 4 for b in closed)
    checked = 0
    for base in closed:
        n = base["boundary"]
        expected = sorted({min(n - 1, max(1, round(f * n))) for f in FRACTIONS}) if n > 1 else []
        assert base["cuts"] == expected
        arms = [
            r for r in records if r["problem_id"] == base["problem_id"] and "prefix_tokens" in r
        ]
        arms = [r for r in arms if r["prefix_tokens"] is not None]
        # each arm at the paper's cut, then at each extra cut in ascending order
        for code in ("empty", "conf", "doubt"):
            ats = [r.get("at") for r in arms if r["condition"] == code]
            assert ats == [None, *expected]
        prompt = None
        for arm in arms:
            at = arm.get("at")
            if at is None:
                continue
            assert arm["prefix_tokens"] == at
            sentence = sentences.text(arm["sentence_id"]) if arm["sentence_id"] else ""
            splice = family.splice_ids(sentence, sealed=False)
            if prompt is None:  # the paper-cut arm's prompt is B's: recover it from its hash
                prompt = _b_prompt(model, base["problem_id"])
            ids = prompt + base["generated_ids"][:at]
            generated = hf_greedy(hf, ids + splice, 8, family.stop_token_ids).tokens
            assert arm["generated_ids"] == generated, (arm["condition"], at)
            checked += 1
    assert checked >= 6


def _b_prompt(model, problem_id: str) -> list[int]:
    prepared = prepare(RunConfig(model=str(model), **TINY))
    index = next(i for i, p in enumerate(prepared.problems) if p.id == problem_id)
    return list(prepared.prompts[index].for_base("B"))


def test_cut_records_are_the_same_bytes_on_both_schedules_and_any_chunking(model, tmp_path):
    _run(model, tmp_path / "stream", schedule="stream", chunk_size=4)
    _run(model, tmp_path / "units", schedule="units", chunk_size=1)
    first = (tmp_path / "stream" / "records.jsonl").read_bytes()
    assert (tmp_path / "units" / "records.jsonl").read_bytes() == first
    assert b'"at":' in first

    status, out = run_verify(tmp_path / "units", "--all")
    assert status == 0, out
    assert any(line.startswith("completeness: ok") for line in out), out

    # a damaged arms part is found on resume and computed again into the same records
    part = next((tmp_path / "units" / "parts").glob("arms-*.jsonl"))
    lines = part.read_text(encoding="utf-8").splitlines()
    dropped = next(line for line in lines if '"at":' in line)
    part.write_text("".join(x + "\n" for x in lines if x != dropped), encoding="utf-8")
    (tmp_path / "units" / "records.jsonl").unlink()
    _run(model, tmp_path / "units", schedule="units", chunk_size=1)
    assert (tmp_path / "units" / "records.jsonl").read_bytes() == first


def test_cuts_and_samples_refuse_what_they_cannot_run(model):
    from nudgeability.splice.run.config import ConfigError

    with pytest.raises(ConfigError, match="--cuts: the resolution phase"):
        prepare(RunConfig(model=str(model), **{**TINY, "resolve": True}))
    with pytest.raises(ConfigError, match="--cuts '1.5'"):
        prepare(RunConfig(model=str(model), **{**TINY, "cuts": "1.5"}))
    with pytest.raises(ConfigError, match="--samples-per-arm 4: greedy decoding"):
        prepare(RunConfig(model=str(model), **{**TINY, "samples_per_arm": 4}))
    with pytest.raises(ConfigError, match="--samples-per-arm 0: must be"):
        prepare(RunConfig(model=str(model), **{**SAMPLED, "samples_per_arm": 0}))


SAMPLED = dict(TINY, decoding="sampled", seeds=(0, 1), cuts="0.5", samples_per_arm=4)


def test_samples_per_arm_do_not_depend_on_the_batch_schedule_or_workers(model, tmp_path):
    """Each arm's 4 samples at each cut: the same bytes on both schedules, at any chunking, across
    worker processes and after a resume that recomputes a damaged arms part; `nudge verify`
    replays every unit; the first sample of each arm is the record a run without the flag writes;
    and each sample equals its prompt run alone."""
    records = _run(model, tmp_path / "stream", schedule="stream", **SAMPLED, chunk_size=4)
    first = (tmp_path / "stream" / "records.jsonl").read_bytes()
    _run(model, tmp_path / "units", schedule="units", **SAMPLED, chunk_size=1)
    assert (tmp_path / "units" / "records.jsonl").read_bytes() == first
    status, err = run_nudge(
        nudge_run_args(
            model,
            tmp_path / "workers",
            n=4,
            max_new_tokens="24,8",
            conditions="empty,conf,doubt",
            decoding="sampled",
            seeds="0,1",
            cuts="0.5",
            samples_per_arm=4,
            chunk_size=1,
            workers=2,
        )
    )
    assert status == 0, err
    assert (tmp_path / "workers" / "records.jsonl").read_bytes() == first
    status, out = run_verify(tmp_path / "units", "--all")
    assert status == 0 and out[-1] == "verdict: PASS", out
    part = next((tmp_path / "units" / "parts").glob("arms-*.jsonl"))
    lines = part.read_text(encoding="utf-8").splitlines()
    part.write_text("".join(x + "\n" for x in lines if '"sample":3' not in x), encoding="utf-8")
    (tmp_path / "units" / "records.jsonl").unlink()
    _run(model, tmp_path / "units", schedule="units", **SAMPLED, chunk_size=1)
    assert (tmp_path / "units" / "records.jsonl").read_bytes() == first

    arms = [r for r in records if r.get("prefix_tokens") is not None]
    by_arm: dict[tuple, list[dict]] = {}
    for arm in arms:
        by_arm.setdefault((arm["problem_id"], arm["condition"], arm["seed"], arm.get("at")), [])
        by_arm[(arm["problem_id"], arm["condition"], arm["seed"], arm.get("at"))].append(arm)
    assert by_arm and all(
        [r.get("sample") for r in rs] == [None, 1, 2, 3] for rs in by_arm.values()
    )
    assert any(len({tuple(r["generated_ids"]) for r in rs}) > 1 for rs in by_arm.values())

    # the first samples are a run without the flag, line for line
    plain = _run(model, tmp_path / "plain", **{**SAMPLED, "samples_per_arm": 1})
    assert [r for r in records if r.get("sample") is None] == plain

    # every sample equals its full prompt decoded alone by the engine with the sample's stream
    from nudgeability.engine import Engine
    from nudgeability.splice.run.runner import unit_context

    ctx = unit_context(prepare(RunConfig(model=str(model), **SAMPLED)), progress=False)
    engine = Engine(ctx.backend.engine.model, ctx.backend.engine.tokenizer)
    bases = {(r["problem_id"], r["seed"]): r for r in records if r["condition"] == "B"}
    checked = 0
    for (pid, code, seed, at), samples in sorted(by_arm.items(), key=str)[:4]:
        base = bases[(pid, seed)]
        cut = base["boundary"] if at is None else at
        prompt = _b_prompt(model, pid) + base["generated_ids"][:cut]
        for k, record in enumerate(samples):
            params = ctx.params(seed, pid, code, 8)
            key = params.seed_key if k == 0 else (*params.seed_key, k)
            params = dataclasses.replace(params, seed_key=key)
            splice = list(ctx.prepared.splices[code])
            (alone,) = engine.generate([prompt + splice], params)
            assert alone.token_ids == record["generated_ids"], (pid, code, at, k)
            checked += 1
    assert checked == 16
