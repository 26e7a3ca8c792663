"""`nudge run --backend openai` against a real `transformers serve` of the embedded SmolLM2, in
text mode: every record is there and reads as the family reads a local run's, `nudge stats` runs
on it, a rerun through a proxy that drops, cuts, delays and answers 429/503 gives the same bytes,
a run killed with SIGKILL and resumed gives the same bytes too, and `nudge verify --all` replays
the run against the server byte for byte and names a forged record's text.

One server for the module (starting it costs a model load); the runs are kept small
(2 StrategyQA problems, NT, B and the conf and doubt arms, 24/12 new tokens: at 24 tokens SmolLM2
closes its thinking on one of the two at least, tests/splice/audit/test_verify_smollm2.py, so the
arms run too).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.servers import FaultPlan, FaultProxy, free_port, start_transformers_serve
from helpers.tiny_runs import (
    forge_record,
    kill_when,
    nudge_run_args,
    read_records,
    run_nudge,
    run_verify,
)
from transformers import AutoTokenizer

from nudgeability.models.families import get_family
from nudgeability.models.smollm2 import converted_dir, find_gguf
from nudgeability.splice.audit.replay import choose_units
from nudgeability.splice.audit.stored_run import open_run
from nudgeability.splice.tasks import get_task

pytestmark = pytest.mark.slow

KEY = "sk-test-do-not-print-0123456789"
N = 2
BASES = ("NT", "B")
ARMS = ("conf", "doubt")  # they bring their base B, and NT


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    directory = converted_dir(find_gguf())
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    serve = start_transformers_serve(directory, log)
    yield serve
    serve.stop()


def _args(url: str, model: str, out: Path, *extra, **changes) -> list:
    """The test's `nudge run` against the server; `changes` replace flags (`api="chat"`)."""
    flags = {"backend": "openai", "base_url": url, "api": "completions", "tokenizer": model}
    flags |= {"prompt_format": "text", "api_key_env": "NUDGE_TEST_KEY", "concurrency": 3}
    flags |= {"n": N, "conditions": "conf,doubt", "max_new_tokens": "24,12", "chunk_size": 1}
    return [*nudge_run_args(model, out, **(flags | changes)), *extra]


@pytest.fixture(scope="module", autouse=True)
def key_in_env():
    """The API key the runs name (transformers serve ignores it; it must never be written)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NUDGE_TEST_KEY", KEY)
        yield


@pytest.fixture(scope="module")
def first_run(server, tmp_path_factory):
    out = tmp_path_factory.mktemp("remote") / "run"
    status, err = run_nudge(_args(server.url, server.model, out))
    assert status == 0, err
    return out, err


def test_every_record_is_there_and_reads_as_a_local_run(server, first_run):
    out, _ = first_run
    records = read_records(out)
    family = get_family("chatml", AutoTokenizer.from_pretrained(server.model))
    task = get_task("strategyqa")
    manifest = json.loads((out / "manifest.json").read_text())
    bases = {(r["problem_id"], r["condition"]): r for r in records if r["condition"] in BASES}
    assert len(bases) == N * len(BASES)
    closed = [p for (p, c), r in bases.items() if c == "B" and r["boundary"] is not None]
    assert closed  # the arms ran (module docstring)
    assert len(records) == len(bases) + len(ARMS) * len(closed)
    assert len({(r["problem_id"], r["condition"], r["seed"]) for r in records}) == len(records)
    for r in records:
        assert r["continuation"] == "text"
        ids = r["generated_ids"]
        assert r["text"] == family.decode(ids)
        if r["condition"] == "NT":
            ids_after, tools = ids, None
        elif r["condition"] == "B":
            assert r["boundary"] == family.find_boundary(ids)
            ids_after, tools = ids[r["boundary"] or 0 :], task.tool_names
        else:  # an arm: its splice (the family's own ids for the sentence) plus its generation
            ids_after, tools = _splice(family, manifest, r) + ids, task.tool_names
        action = family.parse_action(ids_after, r["finish_reason"], tools=tools)
        assert r["action"] == dataclasses.asdict(action)
    assert manifest["backend"] == {
        "backend": "openai",
        "api": "completions",
        "prompt_format": "text",
        "model": server.model,
        "served_model": server.model,
        "continuation": "text",
    }
    assert manifest["endpoint"] == {"base_url": server.url}
    _assert_no_key(out)


def _splice(family, manifest, record) -> list[int]:
    from nudgeability.splice.experiment.sentences import load_sentences

    sentences = load_sentences(manifest["inputs"]["sentences"]["path"])
    text = "" if record["sentence_id"] is None else sentences.text(record["sentence_id"])
    return family.splice_ids(text, sealed=False)


def test_stats_runs_and_marks_the_experiment_text_level(first_run, tmp_path):
    out, _ = first_run
    status, err = run_nudge(["stats", out, "--out", tmp_path / "stats", "--n-boot", 200])
    assert status == 0, err
    document = json.loads((tmp_path / "stats" / "stats.json").read_text())
    assert [e["continuation"] for e in document["experiments"]] == ["text"]
    assert "text-level" in (tmp_path / "stats" / "table.md").read_text()


def test_faults_on_the_wire_change_nothing(server, first_run, tmp_path):
    out, _ = first_run
    host, port = server.url.split("//")[1].split("/")[0].split(":")
    plan = FaultPlan(drop=0.1, cut=0.1, status_429=0.1, status_503=0.1, delay=0.1, seed=3)
    proxy = FaultProxy((host, int(port)), plan)
    try:
        faulty = tmp_path / "faulty"
        status, err = run_nudge(
            _args(
                f"http://127.0.0.1:{proxy.port}/v1", server.model, faulty, "--retry-backoff", 0.05
            )
        )
    finally:
        proxy.close()
    assert status == 0, err
    assert (faulty / "records.jsonl").read_bytes() == (out / "records.jsonl").read_bytes()
    retried = sum(plan.counts.get(k, 0) for k in ("drop", "cut", "status_429", "status_503"))
    assert retried > 0, plan.counts
    timings = [json.loads(line) for line in (faulty / "timings.jsonl").read_text().splitlines()]
    assert sum(t["retries"] for t in timings) == retried  # each fault cost exactly one retry
    _assert_no_key(faulty)


def test_sigkill_then_resume_gives_the_same_bytes(server, first_run, tmp_path):
    out, _ = first_run
    killed = tmp_path / "killed"
    command = [
        sys.executable,
        "-m",
        "nudgeability.cli",
        *map(str, _args(server.url, server.model, killed)),
    ]
    env = {**os.environ, "NUDGE_TEST_KEY": KEY}
    kill_when(command, (killed / "parts" / "B-s0-c00000.jsonl").exists, env=env)
    assert not (killed / "records.jsonl").exists()
    finished = subprocess.run(command, capture_output=True, text=True, env=env)
    assert finished.returncode == 0, finished.stderr
    assert (killed / "records.jsonl").read_bytes() == (out / "records.jsonl").read_bytes()
    assert KEY not in finished.stderr
    _assert_no_key(killed)


def _assert_no_key(out: Path) -> None:
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(encoding="utf-8", errors="replace"), path


def _line(lines: list[str], check: str) -> str:
    (found,) = [line for line in lines if line.startswith(f"{check}: ")]
    return found


def test_verify_replays_the_run_against_the_server_and_names_a_forged_text(
    server, first_run, tmp_path
):
    out, _ = first_run
    key_flag = ("--api-key-env", "NUDGE_TEST_KEY")
    status, lines = run_verify(out, "--all", *key_flag)
    assert status == 0 and lines[-1] == "verdict: PASS (weights not checkable)", lines
    files = len(json.loads((out / "manifest.json").read_text())["inputs"]["tokenizer"]["files"])
    assert _line(lines, "inputs").startswith(f"inputs: ok: tokenizer ({files} files), data and")
    assert _line(lines, "weights").startswith("weights: not checkable: a remote run's weights")
    assert server.url in _line(lines, "weights")
    parts = sorted(p.stem for p in (out / "parts").glob("*.jsonl"))
    replay = _line(lines, "replay")
    assert replay.startswith("replay: ok: every unit regenerated byte for byte: ")
    assert sorted(replay.rsplit(": ", 1)[1].split(", ")) == parts
    assert all(KEY not in line for line in lines)
    # the server is asked only on request, and a server that is not there is one FAIL line
    dead = f"http://127.0.0.1:{free_port()}/v1"
    status, lines = run_verify(out, "--base-url", dead)
    assert status == 0 and lines[-1] == "verdict: PASS (weights not checkable, replay skipped)"
    assert _line(lines, "replay") == (
        "replay: skipped: a remote run is replayed only when asked (--sample K or --all): it "
        f"sends requests to {dead}"
    )
    status, lines = run_verify(out, "--sample", 1, "--base-url", dead)
    assert status == 1 and lines[-1] == "verdict: FAIL (replay)"
    assert _line(lines, "replay").startswith("replay: FAIL: the manifest's configuration cannot")
    assert dead in _line(lines, "replay")
    status, err = run_nudge(["verify", out, "--model", server.model])  # no checkpoint to name
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"nudge verify: error: --model: {out} is a remote run")

    # a forger edits one record's text, in its part and in records.jsonl, and rehashes the seal:
    # only the replay can see it
    forged = shutil.copytree(out, tmp_path / "forged")
    part = forged / "parts" / "B-s0-c00001.jsonl"
    target = part.read_text(encoding="utf-8").split("\n")[0]
    record = json.loads(target)
    record["text"] = "Yes. " + record["text"]
    forge_record(forged, part, target, record)
    # one unit replayed, not the whole run again: a draw seed that picks the forged unit
    units = open_run(forged).units()
    seed = next(s for s in range(1000) if choose_units(units, 1, s)[0].name == part.stem)
    status, lines = run_verify(forged, "--sample", 1, "--seed", seed, *key_flag)
    assert status == 1 and lines[-1] == "verdict: FAIL (replay)", lines
    key = (record["problem_id"], record["condition"], record["seed"])
    assert _line(lines, "replay").startswith(
        f"replay: FAIL: 1 of 1 regenerated units differ ({part.stem}); first: {part}:1: "
        f'record {key}: first differing field text[char 0]: stored "Yes. '
    )  # the forged text shown where it differs: its first characters


def test_an_unknown_model_is_one_line_naming_url_and_model(server, tmp_path):
    out = tmp_path / "out"
    status, err = run_nudge(_args(server.url, "no-such-model", out, tokenizer=server.model))
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nudge run: error: "), err
    assert server.url in lines[0] and "'no-such-model'" in lines[0] and "unknown model" in lines[0]
    assert server.model in lines[0]  # it says what the server does serve
    assert KEY not in err and not out.exists()


def test_chat_bases_come_back_in_the_family_format(server, tmp_path):
    """The chat backend's bases against a real chat endpoint (transformers serve cannot continue a
    partial assistant turn, so the arms are left to llama-server's test): every record is there,
    chat-level, and reads as the family reads it."""
    out = tmp_path / "chat"
    status, err = run_nudge(_args(server.url, server.model, out, api="chat", conditions="B", n=2))
    assert status == 0, err
    records = read_records(out)
    family = get_family("chatml", AutoTokenizer.from_pretrained(server.model))
    assert sorted((r["problem_id"], r["condition"]) for r in records) == sorted(
        (p, c) for p in {r["problem_id"] for r in records} for c in BASES
    )
    assert len(records) == 2 * len(BASES)
    for r in records:
        assert r["continuation"] == "chat" and r["text"] == family.decode(r["generated_ids"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["backend"]["api"] == "chat" and manifest["experiment"]["continuation"] == "chat"


def test_token_mode_against_it_is_refused_naming_the_flag_to_use(server, tmp_path):
    """transformers serve refuses token mode's fields (HTTP 422 "Unexpected fields"): one line
    saying to pass --prompt-format text (issue 25, case 5), nothing written but the manifest."""
    out = tmp_path / "token"
    status, err = run_nudge(_args(server.url, server.model, out, prompt_format="token"))
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1, err
    assert "HTTP 422" in lines[0] and "Unexpected fields" in lines[0], err
    assert "pass --prompt-format text" in lines[0] and KEY not in err
    assert not (out / "records.jsonl").exists()
