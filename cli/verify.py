"""`nudge verify RUN_DIR`: audit a finished run without redoing it.

    nudge verify runs/smollm2-strategyqa-greedy               # 4 checks, 2 units replayed
    nudge verify runs/x --all                                  # replay every unit
    nudge verify runs/x --sample 5 --seed 7 --model /new/place/of/the/checkpoint

One line per check (inputs, completeness, integrity, replay; a remote run also has a `weights`
line saying they cannot be checked here), then a verdict; the exit status is 0 only when every
check holds (a run made before sealing existed is reported `unsealed`, which does not fail it), 1
when one fails, 2 when the directory cannot be read as a run. Nothing is written into the run
directory, and nothing is fetched from a network (the hub is offline), but for the replay of a
remote run, which asks its server again, and only when asked (--sample K or --all).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from nudgeability.splice.audit.check import Check
from nudgeability.splice.audit.replay import DEFAULT_SAMPLE
from nudgeability.splice.audit.verify import (
    AuditRequest,
    choose_replay,
    file_checks,
    open_audit,
    replay,
    verdict,
)


def register(subparsers) -> None:
    """Add the `verify` subcommand to the `nudge` parser."""
    parser = subparsers.add_parser(
        "verify",
        help="audit a run directory: inputs, completeness, integrity, replay of sampled units",
        description="Re-hash a run's inputs, check that its records are complete and match the "
        "hashes sealed in its manifest, and regenerate sampled units byte for byte. Exit status "
        "0 only when every check holds.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the output directory of `nudge run`")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--sample",
        type=int,
        metavar="K",
        help=f"units to regenerate, drawn at random (default: {DEFAULT_SAMPLE}; for a remote run "
        "0, as it sends requests to the server; 0: no replay)",
    )
    which.add_argument("--all", action="store_true", help="regenerate every unit of the run")
    parser.add_argument(
        "--seed", type=int, help="seed of the unit draw (default: a fresh one, printed)"
    )
    parser.add_argument("--model", help="the checkpoint, if it moved since the run")
    parser.add_argument("--data", help="the data file, if it moved since the run")
    parser.add_argument("--sentences", help="the sentences file, if it moved since the run")
    parser.add_argument("--interventions", help="the interventions file, if it moved since the run")
    parser.add_argument(
        "--device",
        help="replay on this device instead of the run's (cpu, cuda, cuda:N); results computed "
        "elsewhere may differ in the last bits, and so in a token",
    )
    remote = parser.add_argument_group("a remote run (made with --backend openai)")
    remote.add_argument("--tokenizer", help="its tokenizer directory, if it moved since the run")
    remote.add_argument(
        "--base-url", help="replay against this server instead of the manifest's endpoint"
    )
    remote.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="the environment variable holding the server's API key (never written anywhere)",
    )
    parser.set_defaults(func=_verify)


def _request(args: argparse.Namespace) -> AuditRequest:
    """The flags, each stored under its AuditRequest field's name, but --all (`everything`)."""
    flags = [f.name for f in dataclasses.fields(AuditRequest) if f.name != "everything"]
    return AuditRequest(everything=args.all, **{name: getattr(args, name) for name in flags})


def _verify(args: argparse.Namespace) -> int:
    request = _request(args)
    run = open_audit(args.run_dir, request)
    checks = []
    for check in file_checks(run, request):
        print(check.line(), flush=True)  # each line as soon as it is known: a replay takes time
        checks.append(check)
    selection = choose_replay(run, request)
    if not isinstance(selection, Check):
        names = ", ".join(unit.name for unit in selection.units)
        print(f"replay: regenerating {selection.description}: {names}", file=sys.stderr)
        from transformers.utils import logging

        logging.disable_progress_bar()  # the weight-loading bar: the check lines are the output
        selection = replay(run, request, selection)
    checks.append(selection)
    print(selection.line(), flush=True)
    status, line = verdict(checks)
    print(line)
    return status
