"""`nudge verify` and the side files a grounded-nudge run writes (`signals/<unit>.npy`, B's hidden
states at the cut, read by `nudge stats`): the seal covers them, a changed or missing one is named,
a forged one whose hash was recomputed is caught by the replay, and a seal written before side
files were sealed still verifies, saying so.

Hashes are recomputed here with hashlib, the flipped byte is written by the test, and the differing
row is read back from the .npy with numpy.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.tiny_runs import nudge_run_args, run_nudge
from helpers.tiny_runs import run_verify as verify

RUN_ARGS = {"n": 3, "chunk_size": 2, "conditions": "primary", "signals": True}


@pytest.fixture(scope="module")
def signal_run(tiny_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("verify-signals") / "run"
    model = tiny_checkpoint("qwen3", close_boost=2.6)
    status, err = run_nudge(nudge_run_args(model, out, **RUN_ARGS))
    assert status == 0, err
    side = sorted((out / "signals").glob("*.npy"))
    assert len(side) == 2, "the fixture run needs a closed B in each of its 2 chunks"
    return out


def line_of(lines: list[str], check: str) -> str:
    (found,) = [line for line in lines if line.startswith(f"{check}: ")]
    return found


def copy_run(run: Path, tmp_path: Path) -> Path:
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # the last row's last float16: the data, not the header
    path.write_bytes(bytes(data))


def rewrite_seal(run: Path, edit) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    edit(manifest["seal"])
    (run / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))


def test_the_seal_holds_every_side_file_and_a_fresh_run_passes(signal_run):
    seal = json.loads((signal_run / "manifest.json").read_text())["seal"]
    assert seal["signals"] == {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (signal_run / "signals").glob("*.npy")
    }
    status, lines = verify(signal_run, "--all")
    assert status == 0 and lines[-1] == "verdict: PASS", lines
    assert line_of(lines, "integrity") == (
        "integrity: ok: records.jsonl, 2 side files (signals/) and 6 part files match the sha256 "
        "sealed in the manifest"
    )


def test_a_changed_or_missing_side_file_is_named(signal_run, tmp_path):
    run = copy_run(signal_run, tmp_path)
    changed, deleted = sorted((run / "signals").glob("*.npy"))
    flip_last_byte(changed)
    status, lines = verify(run, "--sample", 0)
    assert status == 1 and lines[-1] == "verdict: FAIL (integrity)", lines
    assert line_of(lines, "integrity").startswith(f"integrity: FAIL: side file {changed}: sha256")

    shutil.copyfile(signal_run / "signals" / changed.name, changed)  # only the deletion left
    deleted.unlink()
    status, lines = verify(run, "--sample", 0)
    assert status == 1
    assert f"side file {deleted}: missing, though the seal lists it" in line_of(lines, "integrity")


def test_a_forged_side_file_with_its_hash_recomputed_fails_the_replay(signal_run, tmp_path):
    run = copy_run(signal_run, tmp_path)
    forged = sorted((run / "signals").glob("*.npy"))[-1]
    flip_last_byte(forged)
    digest = hashlib.sha256(forged.read_bytes()).hexdigest()
    rewrite_seal(run, lambda seal: seal["signals"].__setitem__(forged.name, digest))
    last_row = len(np.load(forged)) - 1
    status, lines = verify(run, "--all")
    assert status == 1 and lines[-1] == "verdict: FAIL (replay)", lines
    replay = line_of(lines, "replay")
    assert replay.startswith(f"replay: FAIL: 1 of 6 regenerated units differ ({forged.stem})")
    assert f"{forged}: row {last_row} differs from the replayed hidden state" in replay


def test_a_seal_without_side_files_still_verifies_and_says_they_were_not_sealed(
    signal_run, tmp_path
):
    run = copy_run(signal_run, tmp_path)
    rewrite_seal(run, lambda seal: seal.pop("signals"))  # as sealed before side files were
    status, lines = verify(run, "--sample", 0)
    assert status == 0 and lines[-1] == "verdict: PASS (replay skipped)", lines
    integrity = line_of(lines, "integrity")
    assert integrity.startswith("integrity: ok: records.jsonl and 6 part files match")
    assert f"warning: the 2 side files in {run / 'signals'} were not sealed" in integrity
