"""`nudge verify RUN_DIR`: audit a finished run without redoing it.

    nudge verify runs/smollm2-strategyqa-greedy               # 4 checks, 2 units replayed
    nudge verify runs/x --all                                  # replay every unit
    nudge verify runs/x --sample 5 --seed 7 --model /new/place/of/the/checkpoint

One line per check (inputs, completeness, integrity, replay), then a verdict; the exit status is
0 only when every check holds (a run made before sealing existed is reported `unsealed`, which
does not fail it), 1 when one fails, 2 when the directory cannot be read as a run. Nothing is
written into the run directory, and nothing is fetched from a network.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys

from nudgeability.splice.verify import (
    FAIL,
    OK,
    SKIPPED,
    Check,
    StoredRun,
    check_completeness,
    open_run,
)
from nudgeability.splice.verify_hashes import check_inputs, check_integrity

DEFAULT_SAMPLE = 2


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
        default=DEFAULT_SAMPLE,
        metavar="K",
        help=f"units to regenerate, drawn at random (default: {DEFAULT_SAMPLE}; 0: no replay)",
    )
    which.add_argument("--all", action="store_true", help="regenerate every unit of the run")
    parser.add_argument(
        "--seed", type=int, help="seed of the unit draw (default: a fresh one, printed)"
    )
    parser.add_argument("--model", help="the checkpoint, if it moved since the run")
    parser.add_argument("--data", help="the data file, if it moved since the run")
    parser.add_argument("--sentences", help="the sentences file, if it moved since the run")
    parser.add_argument(
        "--device",
        help="replay on this device instead of the run's (cpu, cuda, cuda:N); results computed "
        "elsewhere may differ in the last bits, and so in a token",
    )
    parser.set_defaults(func=_verify)


def _verify(args: argparse.Namespace) -> int:
    # an audit never reaches a hub: set before transformers is imported by a check
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[name] = "1"
    if args.sample < 0:
        raise ValueError(f"--sample {args.sample}: must be >= 0")
    run = open_run(args.run_dir)
    overrides = {
        "model": args.model,
        "data": args.data,
        "sentences": args.sentences,
        "device": args.device,
    }
    checks = []
    for check in (
        check_inputs(run, args.model, args.data, args.sentences),
        check_completeness(run),
        check_integrity(run),
    ):
        print(check.line(), flush=True)  # each line as soon as it is known: a replay takes time
        checks.append(check)
    checks.append(_replay(run, args, overrides))
    print(checks[-1].line(), flush=True)
    failed = [check.name for check in checks if check.failed]
    notes = [f"{check.name} {check.status}" for check in checks if check.status not in (OK, FAIL)]
    if failed:
        print(f"verdict: FAIL ({', '.join(failed)})")
        return 1
    print("verdict: PASS" + (f" ({', '.join(notes)})" if notes else ""))
    return 0


def _replay(run: StoredRun, args: argparse.Namespace, overrides: dict) -> Check:
    from nudgeability.splice.replay import ReplayError, choose_units, replay_units

    units = run.units()
    sample = None if args.all else args.sample
    if sample == 0:
        return Check("replay", SKIPPED, "--sample 0: no unit regenerated")
    seed = args.seed if args.seed is not None else secrets.randbelow(1 << 31)
    chosen = choose_units(units, sample, seed)
    how = "every unit" if args.all else f"{len(chosen)} of {len(units)} units (--seed {seed})"
    print(f"replay: regenerating {how}: {', '.join(u.name for u in chosen)}", file=sys.stderr)
    from transformers.utils import logging

    logging.disable_progress_bar()  # the weight-loading bar: the check lines are the output
    try:
        results = replay_units(run, chosen, **overrides)
    except ReplayError as exc:
        return Check("replay", FAIL, str(exc))
    differing = [result for result in results if result.difference is not None]
    if differing:
        first = differing[0]
        names = ", ".join(result.unit.name for result in differing)
        return Check(
            "replay",
            FAIL,
            f"{len(differing)} of {len(results)} regenerated units differ ({names}); "
            f"first: {first.difference}",
        )
    names = ", ".join(result.unit.name for result in results)
    stored_device = run.manifest["config"].get("device")
    moved = (
        ()
        if args.device in (None, stored_device)
        else (f"replayed on {args.device}, the run computed on {stored_device}",)
    )
    return Check("replay", OK, f"{how} regenerated byte for byte: {names}", moved)
