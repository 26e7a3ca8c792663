"""A `nudge run` killed with SIGKILL at four points, then resumed, writes the records of an
uninterrupted run (made in the test process) byte for byte, and never computes a stored unit twice.

Kill points are found by watching the output directory: right after the directory appears
(before any unit), during NT (its first part exists), during B and during the arms.
"""

from __future__ import annotations

import json
import subprocess
import sys

import torch
from helpers.tiny_runs import (
    kill_when,
    manifest_without_commit,
    nudge_run_args,
    read_records,
    run_nudge,
    run_verify,
)

N_CHUNKS = 4


def _command(model_dir, out) -> list[str]:
    # one thread in every process, so the manifests' `threads` (provenance) agree whatever this
    # test process was left at
    args = nudge_run_args(model_dir, out, n=N_CHUNKS, chunk_size=1, conditions="primary", threads=1)
    return [sys.executable, "-m", "nudgeability.cli", *args]


def _assert_whole_files(out) -> None:
    """After a kill: every stored part is whole JSONL, and no records file exists yet."""
    assert not (out / "records.jsonl").exists()
    for part in (out / "parts").glob("*.jsonl"):
        text = part.read_text(encoding="utf-8")
        assert text == "" or text.endswith("\n")
        for line in text.split("\n")[:-1]:
            json.loads(line)


def test_sigkill_at_four_points_then_resume_equals_an_uninterrupted_run(tiny_checkpoint, tmp_path):
    threads = torch.get_num_threads()  # the in-process run sets it (--threads 1): restored below
    model_dir = tiny_checkpoint("qwen3", close_boost=2.6)
    reference_out, out = tmp_path / "reference", tmp_path / "killed"

    parts = out / "parts"
    kill_points = {
        "directory made, no unit yet": lambda: (out / "manifest.json").exists(),
        "during NT": lambda: (parts / "NT-s0-c00000.jsonl").exists(),
        "during B": lambda: (parts / "B-s0-c00000.jsonl").exists(),
        "during the arms": lambda: (parts / "arms-s0-c00000.jsonl").exists(),
    }
    stored_before = []
    for _name, ready in kill_points.items():
        kill_when(_command(model_dir, out), ready)
        _assert_whole_files(out)
        stored_before.append(sorted(p.name for p in parts.glob("*.jsonl")))
    # every kill landed mid-work: each phase still had units to do when it was killed (the run
    # streams, so a chunk's arms part may follow its B part at once: B must still have had work)
    assert stored_before[0] == []
    assert len([p for p in stored_before[2] if p.startswith("B-")]) < N_CHUNKS
    assert len([p for p in stored_before[3] if p.startswith("arms")]) < N_CHUNKS

    finished = subprocess.run(_command(model_dir, out), capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr
    status, err = run_nudge(
        _command(model_dir, reference_out)[3:]
    )  # uninterrupted, in this process
    torch.set_num_threads(threads)
    assert status == 0, err

    assert (out / "records.jsonl").read_bytes() == (reference_out / "records.jsonl").read_bytes()
    assert manifest_without_commit(out) == manifest_without_commit(reference_out)
    assert any(
        r["condition"] == "conf" for r in read_records(out)
    )  # the arms phase produced records
    # only missing work was done: a unit's timing line is written right after its part, so a unit
    # computed again after it was stored would appear twice (a kill between the two writes can
    # drop a line, at most one per kill)
    units = [json.loads(line)["unit"] for line in (out / "timings.jsonl").read_text().splitlines()]
    expected = {f"{phase}-s0-c{c:05d}" for phase in ("NT", "B", "arms") for c in range(N_CHUNKS)}
    assert len(units) == len(set(units)) and set(units) <= expected
    assert len(units) >= len(expected) - len(kill_points)
    assert not [p for p in out.rglob(".tmp-*")]
    # the killed and resumed run passes every audit check, each of its units replayed
    status, lines = run_verify(out, "--all")
    assert status == 0 and lines[-1] == "verdict: PASS", lines
