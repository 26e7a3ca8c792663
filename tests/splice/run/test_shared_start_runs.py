"""The runner computes each base's shared start once (splice/experiment/shared_start.py): every
engine request of a run carries it, on both schedules; a problem's records do not depend on which
other problems are in the run; the manifest records the starts, and a resume or replay whose
start differs is refused naming the key."""

from __future__ import annotations

import dataclasses
import json

import pytest
from helpers.tiny_runs import read_records, run_verify

from nudgeability.engine import Engine
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.prepare import prepare
from nudgeability.splice.run.runner import run, unit_context
from nudgeability.splice.run.units.resolve import resolve_requests
from nudgeability.splice.rundir.manifest import manifest_text
from nudgeability.splice.rundir.records import Record
from nudgeability.splice.rundir.store import ConfigChangedError

TINY = dict(task="strategyqa", max_new_tokens=16, max_new_tokens_arm=8, device="cpu")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """One torch thread: the engine's forward is single-threaded anyway (engine/invariant/cpu/products.py)."""


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return tiny_checkpoint("qwen3", close_boost=2.6)


def _prepared(model, **config):
    return prepare(RunConfig(model=str(model), **{**TINY, **config}))


@pytest.mark.parametrize("schedule", ["units", "stream"])
def test_every_request_carries_its_bases_start(model, tmp_path, monkeypatch, schedule):
    """Bases, self-consistency samples, hidden-state passes, arms and resolutions: each prompt
    or prefix is submitted with `shared` = its base's start, whose tokens it begins with."""
    prepared = _prepared(
        model, n=3, chunk_size=2, conditions=("all",), consistency_samples=2, resolve=True
    )
    starts = prepared.starts.tokens
    seen = []
    submit = Engine.submit_fork

    def spy(self, request, **kwargs):
        seen.append((list(request.prefix_ids), request.shared, bool(request.stem)))
        return submit(self, request, **kwargs)

    monkeypatch.setattr(Engine, "submit_fork", spy)  # submit_generate and fork_many come here
    run(prepared, tmp_path / "run", progress=False, schedule=schedule)
    assert len(seen) > 3 * 4  # at least the bases of 3 problems
    for prefix, shared, _ in seen:
        matches = [base for base, ids in starts.items() if prefix[: len(ids)] == list(ids)]
        assert shared > 0 and any(shared == len(starts[base]) for base in matches)
    assert any(stem for *_, stem in seen)  # forks (arms, resolutions) are among them
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["shared_start"] == {base: len(ids) for base, ids in starts.items()}


def test_a_problems_records_do_not_depend_on_the_others_in_the_run(model, tmp_path):
    """n=2 draws the first two problems of n=4's draw: their records are the same lines."""
    common = dict(conditions=("primary", "oracle"))
    run(_prepared(model, n=2, **common), tmp_path / "n2", progress=False)
    run(_prepared(model, n=4, **common), tmp_path / "n4", progress=False)
    two = read_records(tmp_path / "n2")
    four = [
        r
        for r in read_records(tmp_path / "n4")
        if r["problem_id"] in {r["problem_id"] for r in two}
    ]
    assert four == two
    assert any(r["condition"] == "conf" for r in two)  # arms ran


def test_a_run_with_another_start_is_neither_resumed_nor_replayed(model, tmp_path):
    """A manifest whose `shared_start` differs from what the code derives (written by other
    code, or before the key existed): resuming refuses it, and verify's replay names the key."""
    out = tmp_path / "run"
    run(_prepared(model, n=2, conditions=("primary",)), out, progress=False)
    status, lines = run_verify(out, "--all")
    assert status == 0, lines
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["shared_start"]["B"] -= 1
    path.write_text(manifest_text(manifest))
    status, lines = run_verify(out, "--sample", 1, "--seed", 0)
    assert status == 1
    (replay,) = [line for line in lines if line.startswith("replay: ")]
    assert "shared_start.B: stored" in replay
    del manifest["shared_start"]
    path.write_text(manifest_text(manifest))
    with pytest.raises(ConfigChangedError, match="shared_start: stored nothing"):
        run(_prepared(model, n=2, conditions=("primary",)), out, progress=False)


def test_a_resolution_forks_with_its_bases_start(model, tmp_path):
    """A tiny model writes no tool call: a closed B's record is given one (as a model writes it
    after the close), and its resolution's fork (resolve.py `resolve_requests`) carries B's
    start, as B and its arms do."""
    prepared = _prepared(model, n=3, conditions=("primary",), resolve=True)
    run(prepared, tmp_path / "run", progress=False, schedule="units")
    family, start = prepared.family, prepared.starts.tokens["B"]
    lines = []
    for path in sorted((tmp_path / "run" / "parts").glob("B-*.jsonl")):
        lines += path.read_text(encoding="utf-8").split("\n")[:-1]
    record = next(r for r in map(Record.from_json, lines) if r.boundary is not None)
    call = family.encode(
        '</think>\n\n<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>'
    )
    action = family.parse_action(call, "stop_token", tools=["search"])
    assert action.kind == "TOOL"
    planted = dataclasses.replace(
        record, generated_ids=record.generated_ids[: record.boundary] + call, action=action
    )
    index = [p.id for p in prepared.problems].index(record.problem_id)
    ctx = unit_context(prepared, progress=False)
    ((request, _),) = resolve_requests(ctx, 0, index, planted, {}, {})
    assert request.shared == len(start) > 0
    assert list(request.prefix_ids[: len(start)]) == list(start)
    assert request.stem == record.boundary + 1
