"""`nudge run --resolve` on a tiny Qwen3: one resolution per TOOL record, each equal to HF `generate`
on its full prompt alone, and a run killed during the resolution phase resumes byte for byte.

A tiny random model never writes a well-formed tool call, so the test plants TOOL records: after a
first run, it rewrites the stored parts of a few base and arm records so that their generation
after the cut is a call (as a model would write it, with `parse_action` reading the action), then
drops the resolution parts and runs the same command again. The runner resumes: it keeps the
stored bases and arms and computes the resolution phase from them. The expected prompts are built
here from the rendered prompt, the stored ids and Qwen3's tool-result turn written out by hand
(models/README.md, "Tool results": `<tool_response>` inside a user turn).
"""

from __future__ import annotations

import hashlib
import json
import sys

import numpy as np
import pytest
import torch
from helpers.engine_reference import hf_greedy
from helpers.tiny_runs import kill_when, nudge_run_args, read_records, run_nudge
from transformers import AutoModelForCausalLM, AutoTokenizer

from nudgeability.engine.scheduling.group_shape import GroupShape, batch_cost
from nudgeability.models.families import Family, get_family
from nudgeability.splice.experiment.sentences import load_sentences
from nudgeability.splice.rundir.seal import record_part_hash
from nudgeability.splice.tasks import get_task, sample_problems
from nudgeability.splice.tasks.tools import SearchIndex

if not hasattr(Family, "continuation_ids"):  # the families' tool-result turns (issue 14, item 3)
    pytest.skip("needs Family.continuation_ids (the tool-result turns)", allow_module_level=True)

N, BASE_BUDGET, ARM_BUDGET = 3, 24, 12
CONDITIONS = "conf,doubt,oracle"  # with NT, B and oracle_B
SENTENCES = {"conf": "first.confidence", "doubt": "first.doubt", "oracle_conf": "first.confidence"}


def _command(model_dir, out) -> list[str]:
    budgets = f"{BASE_BUDGET},{ARM_BUDGET}"
    return nudge_run_args(
        model_dir,
        out,
        n=N,
        chunk_size=1,
        conditions=CONDITIONS,
        max_new_tokens=budgets,
        resolve=True,
    )


def _call(name: str, arguments: dict) -> str:
    return f"</think>\n\n<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


# (condition, tool, arguments) planted on the problems whose base closed its thinking, in turn
PLANTS = (
    ("B", "search", {"query": "Genghis Khan children"}),
    ("doubt", "search", {"query": "lawful arrests police"}),
    ("oracle_B", "ask_expert", {"question": "Is it?"}),
    ("conf", "search", {"q": "arguments that do not fit the declaration"}),
    ("oracle_conf", "ask_expert", {"question": "Really?"}),
)


def _plant(out, family) -> list[tuple[str, str]]:
    """Rewrite stored records into TOOL calls; return the (problem, condition) keys planted."""
    planted, parts = [], out / "parts"
    for path in sorted(parts.glob("*.jsonl")):
        if path.name.startswith(("NT-", "resolve-")):
            continue
        lines = path.read_text(encoding="utf-8").split("\n")[:-1]
        changed = False
        for k, line in enumerate(lines):
            record = json.loads(line)
            for condition, tool, arguments in PLANTS:
                if record["condition"] != condition or any(c == condition for _, c in planted):
                    continue
                if record["condition"] in ("B", "oracle_B") and record["boundary"] is None:
                    continue
                call = family.encode(_call(tool, arguments))
                keep = record["generated_ids"][: record["boundary"]] if record["boundary"] else []
                record["generated_ids"] = keep + call
                record["text"] = family.decode(record["generated_ids"])
                record["finish_reason"] = "stop_token"
                action = family.parse_action(call, "stop_token", tools=[tool])
                assert action.kind == "TOOL"
                record["action"] = {
                    key: getattr(action, key) for key in record["action"]
                }  # the stored schema, filled by the parser
                lines[k] = json.dumps(
                    record, sort_keys=True, ensure_ascii=False, separators=(",", ":")
                )
                planted.append((record["problem_id"], condition))
                changed = True
        if changed:
            data = "".join(line + "\n" for line in lines).encode("utf-8")
            path.write_bytes(data)
            # planted as if the run had written it: its hash goes in the part journal, which a
            # resume trusts before the seal (splice/rundir/seal.py), or the part is recomputed
            record_part_hash(out, path.name, data)
    for path in parts.glob("resolve-*.jsonl"):
        path.unlink()
    for name in ("records.jsonl", "resolutions.jsonl"):
        (out / name).unlink()
    return planted


@pytest.fixture(scope="module")
def planted_run(tiny_checkpoint, tmp_path_factory):
    model_dir = tiny_checkpoint("qwen3", close_boost=2.6)
    out = tmp_path_factory.mktemp("resolve") / "out"
    status, err = run_nudge(_command(model_dir, out))
    assert status == 0, err
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    family = get_family("qwen3", tokenizer)
    planted = _plant(out, family)
    assert len(planted) >= 4, planted  # the fixture exercises bases, arms and both tools
    parts = {p.name: p.read_bytes() for p in (out / "parts").glob("*.jsonl")}
    status, err = run_nudge(_command(model_dir, out))
    assert status == 0, err
    return model_dir, out, family, planted, parts


def _resolutions(out) -> list[dict]:
    text = (out / "resolutions.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.split("\n")[:-1]]


def test_every_tool_record_gets_exactly_one_resolution(planted_run):
    _, out, _, planted, _ = planted_run
    records = read_records(out)
    tools = [
        (r["problem_id"], r["condition"], r["seed"])
        for r in records
        if r["action"]["kind"] == "TOOL"
    ]
    # counted by hand: the planted calls, plus any the tiny model wrote itself
    assert {(p, c) for p, c, _ in tools} >= set(planted)
    resolutions = _resolutions(out)
    assert [(r["problem_id"], r["condition"], r["seed"]) for r in resolutions] == tools
    lines = (out / "records.jsonl").read_text(encoding="utf-8").split("\n")[:-1]
    by_key = {}
    for line in lines:
        record = json.loads(line)
        by_key[(record["problem_id"], record["condition"], record["seed"])] = line
    for r in resolutions:
        source = by_key[(r["problem_id"], r["condition"], r["seed"])]
        assert r["source_sha256"] == hashlib.sha256(source.encode()).hexdigest()


def _check_against_hf(model_dir, out, family) -> dict[tuple[str, str], tuple[int, list[int]]]:
    """Check every resolution of `out` against HF `generate` on its full prompt rebuilt here;
    return each (problem, base) group's prefix length and its executed suffixes' lengths."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    task = get_task("strategyqa")
    problems = {p.id: p for p in sample_problems(task.load(), N, 0)}
    records = {(r["problem_id"], r["condition"]): r for r in read_records(out)}
    sentences = load_sentences()
    index = SearchIndex.from_file(task.default_data_path())
    checked = unresolved = 0
    groups: dict[tuple[str, str], tuple[int, list[int]]] = {}
    for r in _resolutions(out):
        problem = problems[r["problem_id"]]
        code = r["condition"]
        source = records[(problem.id, code)]
        base_code = "oracle_B" if code.startswith("oracle") else "B"
        base = records[(problem.id, base_code)]
        arguments = source["action"]["arguments"]
        if "query" not in arguments and "question" not in arguments:
            assert (r["executed"], r["generated_ids"], r["action"]) == (False, [], None)
            assert r["unresolved"].startswith("not executed")
            unresolved += 1
            continue
        if r["tool_name"] == "search":
            result = index.search(arguments["query"])
        else:
            result = f"The answer is {'yes' if problem.gold else 'no'}."
        assert r["result_sha256"] == hashlib.sha256(result.encode()).hexdigest()
        prompt = family.render(
            *(task.oracle(problem) if base_code == "oracle_B" else task.with_tool(problem))
        )
        ids = prompt + base["generated_ids"][: base["boundary"]]
        prefix = len(ids)
        if code == base_code:
            ids += base["generated_ids"][base["boundary"] :]
        else:
            ids += family.splice_ids(sentences.text(SENTENCES[code]), sealed=False)
            ids += source["generated_ids"]
        # Qwen3's tool-result turn, written out from its chat template by hand
        turn = (
            "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
            + result
            + "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        )
        ids += tokenizer_ids(family, turn)
        assert r["prompt_tokens"] == len(ids)
        assert r["prompt_sha256"] == hashlib.sha256(np.asarray(ids, "<i4").tobytes()).hexdigest()
        generated = hf_greedy(model, ids, ARM_BUDGET, family.stop_token_ids).tokens
        assert r["generated_ids"] == generated, code
        assert r["action"] is not None and r["executed"]
        groups.setdefault((problem.id, base_code), (prefix, []))[1].append(len(ids) - prefix)
        checked += 1
    assert checked >= 3 and unresolved == 1
    return groups


def test_resolutions_equal_hf_generate_on_their_full_prompt(planted_run):
    model_dir, out, family, _, _ = planted_run
    _check_against_hf(model_dir, out, family)


def test_a_kv_budget_too_small_for_a_group_runs_its_resolutions_one_by_one(planted_run, tmp_path):
    model_dir, reference, family, _, parts = planted_run
    groups = _check_against_hf(model_dir, reference, family).values()
    single = max(
        batch_cost([GroupShape.of(p, [n], [ARM_BUDGET])]) for p, sizes in groups for n in sizes
    )
    together = max(
        batch_cost([GroupShape.of(p, sizes, [ARM_BUDGET] * len(sizes))]) for p, sizes in groups
    )
    assert together > single  # a group that must be split
    out = tmp_path / "budget"
    command = [*_command(model_dir, out), "--max-batch-tokens", str(single)]
    assert run_nudge(command)[0] == 0
    _replant(out, parts)
    status, err = run_nudge(command)
    assert status == 0, err
    assert _check_against_hf(model_dir, out, family) == _check_against_hf(
        model_dir, reference, family
    )
    assert (out / "resolutions.jsonl").read_bytes() == (
        reference / "resolutions.jsonl"
    ).read_bytes()


def tokenizer_ids(family, text: str) -> list[int]:
    return list(family.tokenizer.encode(text, add_special_tokens=False))


def test_killed_during_the_resolution_phase_resumes_byte_for_byte(planted_run, tmp_path):
    model_dir, reference, family, _, parts = planted_run
    out = tmp_path / "killed"
    status, err = run_nudge(_command(model_dir, out))
    assert status == 0, err
    _replant(out, parts)  # the same plants: the reference's stored parts
    command = [sys.executable, "-m", "nudgeability.cli", *_command(model_dir, out)]
    kill_when(command, (out / "parts" / "resolve-s0-c00000.jsonl").exists)
    assert not (out / "resolutions.jsonl").exists()
    status, err = run_nudge(_command(model_dir, out))
    assert status == 0, err
    for name in ("records.jsonl", "resolutions.jsonl"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name


def _replant(out, parts: dict[str, bytes]) -> None:
    """Give `out` the planted parts of its own chunks and drop its resolution phase's outputs."""
    for path in (out / "parts").glob("*.jsonl"):
        if path.name.startswith("resolve-"):
            path.unlink()
        elif path.name in parts:
            path.write_bytes(parts[path.name])
            record_part_hash(out, path.name, parts[path.name])  # as if this run had written it
    for name in ("records.jsonl", "resolutions.jsonl"):
        (out / name).unlink()


def test_sharded_resolution_merges_into_the_unsharded_files(planted_run, tmp_path):
    model_dir, reference, _, _, parts = planted_run
    shards = []
    for k in (1, 2):
        shard = tmp_path / f"shard{k}"
        command = [*_command(model_dir, shard), "--shard", f"{k}/2"]
        assert run_nudge(command)[0] == 0
        _replant(shard, parts)
        status, err = run_nudge(command)
        assert status == 0, err
        shards.append(shard)
    merged = tmp_path / "merged"
    status, err = run_nudge(["merge", merged, *shards])
    assert status == 0, err
    for name in ("records.jsonl", "resolutions.jsonl"):
        assert (merged / name).read_bytes() == (reference / name).read_bytes(), name
