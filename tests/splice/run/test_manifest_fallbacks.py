"""A run's manifest lists the fallbacks the process took (`util/fallbacks.py`), written with the
seal; the records do not change, and a resume does not compare them (splice/rundir/manifest.py)."""

from __future__ import annotations

import json

from helpers.tiny_runs import nudge_run_args, run_nudge

from nudgeability.engine import Engine
from nudgeability.util import fallbacks


def _run(model_dir, out):
    status, err = run_nudge(nudge_run_args(model_dir, out, n=2, max_new_tokens="12,6"))
    assert status == 0, err


def test_a_fallback_taken_during_the_run_is_in_its_manifest(tiny_checkpoint, tmp_path, monkeypatch):
    model_dir = tiny_checkpoint("qwen3", close_boost=2.6)
    fallbacks.reset()
    _run(model_dir, tmp_path / "plain")
    plain = json.loads((tmp_path / "plain" / "manifest.json").read_text())
    assert plain["fallbacks"] == []

    step = Engine.step

    def step_with_a_fallback(self):  # what a kernel that refused a shape would do mid-run
        fallbacks.record("test_kernel layers.0.q_proj", "exact", "refused a shape")
        return step(self)

    monkeypatch.setattr(Engine, "step", step_with_a_fallback)
    fallbacks.reset()
    try:
        _run(model_dir, tmp_path / "fell")
    finally:
        fallbacks.reset()
    fell = json.loads((tmp_path / "fell" / "manifest.json").read_text())
    assert fell["fallbacks"] == [
        {"path": "test_kernel layers.0.q_proj", "used": "exact", "reason": "refused a shape"}
    ]
    assert "seal" in fell
    records = "records.jsonl"
    assert (tmp_path / "fell" / records).read_bytes() == (tmp_path / "plain" / records).read_bytes()
    # everything else in the manifest is the same run's, and a resume ignores the fallbacks
    assert {k: v for k, v in fell.items() if k not in ("fallbacks", "seal")} == {
        k: v for k, v in plain.items() if k not in ("fallbacks", "seal")
    }
    monkeypatch.setattr(Engine, "step", step)
    _run(model_dir, tmp_path / "fell")  # resumes the finished run: nothing refused
    again = json.loads((tmp_path / "fell" / "manifest.json").read_text())
    assert again["fallbacks"] == fell["fallbacks"]  # its records were computed so
