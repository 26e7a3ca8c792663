"""`--resolve` and `--retrieve-k`: bad values are one-line errors before any output, and a run
without the resolution phase writes the manifest config earlier versions wrote."""

from __future__ import annotations

import json

from helpers.tiny_runs import nudge_run_args, run_nudge


def _fail(model_dir, tmp_path, *extra) -> str:
    out = tmp_path / "out"
    status, err = run_nudge([*nudge_run_args(model_dir, out, task=None, max_new_tokens=4), *extra])
    assert status == 2 and err.count("\n") == 1 and err.startswith("nudge run: error: "), err
    assert not out.exists() and not list(tmp_path.glob(".out*"))  # nothing half-made
    return err.strip()


def test_retrieve_k_needs_resolve_and_a_positive_value(tiny_checkpoint, tmp_path):
    model_dir = tiny_checkpoint("qwen3")
    assert "--retrieve-k" in _fail(model_dir, tmp_path, "--retrieve-k", "2")
    assert "--retrieve-k 0" in _fail(model_dir, tmp_path, "--resolve", "--retrieve-k", "0")


def test_a_strategyqa_file_without_facts_is_refused_naming_the_line(
    tiny_checkpoint, tmp_path, write_json
):
    records = [{"qid": "a", "question": "Is it?", "answer": True}]
    data = write_json(records)
    err = _fail(
        tiny_checkpoint("qwen3"),
        tmp_path,
        "--task",
        "strategyqa",
        "--data",
        data,
        "--n",
        "1",
        "--resolve",
    )
    assert f"{data}:2: record has no 'facts' field" in err
    # the same file runs without the resolution phase, which needs no index
    plain = {"data": data, "n": 1, "conditions": "NT", "max_new_tokens": 2}
    status, err = run_nudge(nudge_run_args(tiny_checkpoint("qwen3"), tmp_path / "plain", **plain))
    assert status == 0, err


def test_the_manifest_names_resolve_only_when_the_run_resolves(tiny_checkpoint, tmp_path):
    model_dir = tiny_checkpoint("qwen3")
    plain, resolved = tmp_path / "plain", tmp_path / "resolved"
    args = {"n": 1, "conditions": "NT", "max_new_tokens": 2}
    assert run_nudge(nudge_run_args(model_dir, plain, **args))[0] == 0
    assert run_nudge(nudge_run_args(model_dir, resolved, **args, resolve=True))[0] == 0
    config = json.loads((plain / "manifest.json").read_text())["config"]
    assert "resolve" not in config and "retrieve_k" not in config
    config = json.loads((resolved / "manifest.json").read_text())["config"]
    assert (config["resolve"], config["retrieve_k"]) == (True, 1)
    assert (resolved / "resolutions.jsonl").read_text() == ""  # NT alone: no TOOL record
