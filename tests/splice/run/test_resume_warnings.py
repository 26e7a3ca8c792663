"""What a resumed run says when its provenance differs from its start (splice/run/runner.py
`resume_warnings`): it names what differs, and never calls a thread count other code."""

from __future__ import annotations

from pathlib import Path

from nudgeability.splice.run.runner import resume_warnings
from nudgeability.splice.rundir.manifest_keys import compare_manifests

STARTED = {"config": {"n": 8}, "versions": {"torch": "2.13.0"}, "threads": 1, "git_commit": "a"}


def _warnings(**now) -> list[str]:
    identity, provenance = compare_manifests(STARTED, {**STARTED, **now})
    assert identity == []  # provenance never decides the records
    return resume_warnings(Path("/runs/x"), provenance)


def test_another_thread_count_is_named_as_such():
    (warning,) = _warnings(threads=2)
    assert "thread count" in warning and "threads: stored 1, now 2" in warning
    assert "other code" not in warning


def test_other_code_is_named_with_what_changed():
    (warning,) = _warnings(versions={"torch": "2.14.1"}, git_commit="b")
    assert warning.startswith("resuming /runs/x with other code")
    assert 'versions.torch: stored "2.13.0", now "2.14.1"' in warning and "git_commit" in warning


def test_nothing_differs_nothing_is_said():
    assert _warnings() == []
    assert len(_warnings(threads=2, git_commit="b")) == 2
