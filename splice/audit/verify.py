"""`nudge verify` as library calls: open a run for an audit, its file checks, the replay, the verdict.

    request = AuditRequest(sample=5, seed=11)
    run = open_audit("runs/x", request)
    checks = list(file_checks(run, request))  # inputs, (weights), completeness, integrity
    selection = choose_replay(run, request)  # the units to regenerate, or a Check: none
    if not isinstance(selection, Check):
        selection = replay(run, request, selection)
    status, line = verdict([*checks, selection])

Each check returns a `Check` (check.py) as soon as it is known, so a command can print it before
the replay starts. Nothing is written into the run directory, and nothing is fetched from a
network (the hub is switched offline), but for the replay of a remote run, and only when asked.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from nudgeability.splice.audit.check import FAIL, OK, Check
from nudgeability.splice.audit.completeness import check_completeness
from nudgeability.splice.audit.hashes import check_inputs, check_integrity, check_weights
from nudgeability.splice.audit.replay import ReplaySelection, replay_check, select_replay
from nudgeability.splice.audit.stored_run import StoredRun, open_run


class AuditRequestError(ValueError):
    """A `nudge verify` option that cannot be used for this run; the message names the flag."""


@dataclass(frozen=True)
class AuditRequest:
    """What an auditor asks for: the replay's extent and the inputs given anew (the flags of
    `nudge verify`, README "Audit a run")."""

    sample: int | None = None  # units to replay at random; None: the default
    everything: bool = False  # --all
    seed: int | None = None  # the seed of the draw; None: a fresh one
    model: str | None = None  # a moved checkpoint
    data: str | None = None
    sentences: str | None = None
    interventions: str | None = None  # a run's moved interventions file
    device: str | None = None  # replay on another device than the run's
    tokenizer: str | None = None  # a remote run's moved tokenizer
    base_url: str | None = None  # a remote run replayed against another server
    api_key_env: str | None = None  # the variable holding that server's key


def open_audit(run_dir: str | Path, request: AuditRequest) -> StoredRun:
    """The run directory opened for an audit, after refusing what the request cannot do here
    (`AuditRequestError` naming the flag); the hub is switched offline for the process."""
    # an audit never reaches a hub: set before transformers is imported by a check
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[name] = "1"
    if request.sample is not None and request.sample < 0:
        raise AuditRequestError(f"--sample {request.sample}: must be >= 0")
    run = open_run(run_dir)
    _check_request(run, request, run_dir)
    return run


def _check_request(run: StoredRun, request: AuditRequest, run_dir: str | Path) -> None:
    """Refuse the flags that do not apply to this kind of run, naming the one to use."""
    if run.remote:
        for flag, value in (("--model", request.model), ("--device", request.device)):
            if value is not None:
                raise AuditRequestError(
                    f"{flag}: {run_dir} is a remote run, computed by its server; give a "
                    "moved tokenizer with --tokenizer, another server with --base-url"
                )
        return
    for flag, value in (
        ("--tokenizer", request.tokenizer),
        ("--base-url", request.base_url),
        ("--api-key-env", request.api_key_env),
    ):
        if value is not None:
            raise AuditRequestError(f"{flag}: only for a remote run; {run_dir} ran in-process")


def file_checks(run: StoredRun, request: AuditRequest) -> Iterator[Check]:
    """The checks that read files only, one at a time: inputs, (weights, for a remote run),
    completeness, integrity."""
    yield check_inputs(
        run,
        request.model,
        request.data,
        request.sentences,
        request.tokenizer,
        request.interventions,
    )
    if run.remote:
        yield check_weights(run)
    yield check_completeness(run)
    yield check_integrity(run)


def choose_replay(run: StoredRun, request: AuditRequest) -> ReplaySelection | Check:
    """The units the request replays, or the check saying why none is (`select_replay`)."""
    return select_replay(
        run,
        sample=request.sample,
        everything=request.everything,
        seed=request.seed,
        base_url=request.base_url,
        tokenizer=request.tokenizer,
        api_key_env=request.api_key_env,
    )


def replay(run: StoredRun, request: AuditRequest, selection: ReplaySelection) -> Check:
    """The replay of the selected units with the request's moved inputs (`replay_check`)."""
    return replay_check(
        run,
        selection,
        model=request.model,
        data=request.data,
        sentences=request.sentences,
        device=request.device,
        interventions=request.interventions,
    )


def verdict(checks: Iterable[Check]) -> tuple[int, str]:
    """(exit status, verdict line): 0 and PASS when no check failed (with the checks that were
    neither ok nor failed named), else 1 and FAIL naming the failed checks."""
    checks = list(checks)
    failed = [check.name for check in checks if check.failed]
    if failed:
        return 1, f"verdict: FAIL ({', '.join(failed)})"
    notes = [f"{check.name} {check.status}" for check in checks if check.status not in (OK, FAIL)]
    return 0, "verdict: PASS" + (f" ({', '.join(notes)})" if notes else "")
