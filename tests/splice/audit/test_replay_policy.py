"""The audit's policy as library calls (splice/audit/replay.py, verify.py), on hand-written
manifests: which units a replay regenerates, what is skipped and why, which flags a kind of run
refuses, and the verdict line. No model runs here; test_verify.py replays real units."""

from __future__ import annotations

import json
import random

import pytest

from nudgeability.splice.audit.check import FAIL, OK, SKIPPED, UNSEALED, Check
from nudgeability.splice.audit.replay import ReplaySelection, select_replay
from nudgeability.splice.audit.verify import AuditRequest, AuditRequestError, open_audit, verdict

# three problems in chunks of 2: NT, B and arms units for chunks 0 and 1 -> 6 units
CONFIG = {"conditions": ["primary"], "seeds": [0], "chunk_size": 2, "shard": None}
UNITS = ["NT-s0-c00000", "NT-s0-c00001", "B-s0-c00000", "B-s0-c00001", "arms-s0-c00000"]
UNITS += ["arms-s0-c00001"]


def _run_dir(tmp_path, remote: bool = False):
    manifest = {"problems": ["p0", "p1", "p2"], "config": {**CONFIG, "device": "cpu"}}
    if remote:
        manifest["backend"] = {"api": "completions", "prompt_format": "text"}
        manifest["endpoint"] = {"base_url": "http://127.0.0.1:9/v1"}
        manifest["inputs"] = {"tokenizer": {"directory": "/tok"}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path


def test_a_local_run_replays_two_units_drawn_with_the_seed(tmp_path):
    run = open_audit(_run_dir(tmp_path), AuditRequest())
    assert [u.name for u in run.units()] == UNITS
    chosen = select_replay(run, seed=11)
    drawn = sorted(random.Random(11).sample(range(6), 2))  # the draw, written out: 2 of 6
    assert isinstance(chosen, ReplaySelection) and chosen.remote is None
    assert [u.name for u in chosen.units] == [UNITS[i] for i in drawn]
    assert chosen.description == "2 of 6 units (--seed 11)"
    everything = select_replay(run, everything=True, sample=3)
    assert [u.name for u in everything.units] == UNITS and everything.description == "every unit"
    assert select_replay(run, sample=0) == Check(
        "replay", SKIPPED, "--sample 0: no unit regenerated"
    )


def test_a_remote_run_is_replayed_only_when_asked_and_against_its_server(tmp_path):
    run = open_audit(_run_dir(tmp_path, remote=True), AuditRequest())
    skipped = select_replay(run)
    assert skipped.status == SKIPPED and "http://127.0.0.1:9/v1" in skipped.detail
    chosen = select_replay(run, sample=1, seed=3, base_url="http://other:8000/v1")
    assert len(chosen.units) == 1
    assert (chosen.remote.base_url, chosen.remote.api, chosen.remote.tokenizer) == (
        "http://other:8000/v1",
        "completions",
        "/tok",
    )


@pytest.mark.parametrize(
    "remote,request_,message",
    [
        (False, AuditRequest(tokenizer="/t"), "--tokenizer: only for a remote run;"),
        (False, AuditRequest(base_url="http://x"), "--base-url: only for a remote run;"),
        (True, AuditRequest(model="/m"), "--model: "),
        (True, AuditRequest(device="cpu"), "--device: "),
        (False, AuditRequest(sample=-1), "--sample -1: must be >= 0"),
    ],
)
def test_flags_that_do_not_apply_are_refused_naming_the_flag(tmp_path, remote, request_, message):
    with pytest.raises(AuditRequestError) as error:
        open_audit(_run_dir(tmp_path, remote), request_)
    assert str(error.value).startswith(message)


def test_the_verdict_fails_on_any_failed_check_and_names_the_others():
    ok, bad = Check("inputs", OK, "."), Check("replay", FAIL, ".")
    unsealed, skipped = Check("integrity", UNSEALED, "."), Check("replay", SKIPPED, ".")
    assert verdict([ok, ok]) == (0, "verdict: PASS")
    assert verdict([ok, unsealed, skipped]) == (
        0,
        "verdict: PASS (integrity unsealed, replay skipped)",
    )
    assert verdict([ok, unsealed, bad]) == (1, "verdict: FAIL (replay)")
