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
import os
import secrets
import sys

from nudgeability.backends.http_client import public_url
from nudgeability.splice.backend_setup import is_remote, remote_spec_of
from nudgeability.splice.verify import (
    FAIL,
    OK,
    SKIPPED,
    Check,
    StoredRun,
    check_completeness,
    open_run,
)
from nudgeability.splice.verify_hashes import check_inputs, check_integrity, check_weights
from nudgeability.splice.work_store import MANIFEST

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


def _verify(args: argparse.Namespace) -> int:
    # an audit never reaches a hub: set before transformers is imported by a check
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[name] = "1"
    if args.sample is not None and args.sample < 0:
        raise ValueError(f"--sample {args.sample}: must be >= 0")
    run = open_run(args.run_dir)
    remote = is_remote(run.manifest)
    _check_flags(args, remote)
    checks = []
    first = [check_inputs(run, args.model, args.data, args.sentences, args.tokenizer)]
    first += [check_weights(run)] if remote else []
    for check in (*first, check_completeness(run), check_integrity(run)):
        print(check.line(), flush=True)  # each line as soon as it is known: a replay takes time
        checks.append(check)
    checks.append(_replay(run, args))
    print(checks[-1].line(), flush=True)
    failed = [check.name for check in checks if check.failed]
    notes = [f"{check.name} {check.status}" for check in checks if check.status not in (OK, FAIL)]
    if failed:
        print(f"verdict: FAIL ({', '.join(failed)})")
        return 1
    print("verdict: PASS" + (f" ({', '.join(notes)})" if notes else ""))
    return 0


def _check_flags(args: argparse.Namespace, remote: bool) -> None:
    """Refuse the flags that do not apply to this kind of run, naming the one to use."""
    if remote:
        for flag, value in (("--model", args.model), ("--device", args.device)):
            if value is not None:
                raise ValueError(
                    f"{flag}: {args.run_dir} is a remote run, computed by its server; give a "
                    "moved tokenizer with --tokenizer, another server with --base-url"
                )
        return
    for flag, value in (
        ("--tokenizer", args.tokenizer),
        ("--base-url", args.base_url),
        ("--api-key-env", args.api_key_env),
    ):
        if value is not None:
            raise ValueError(f"{flag}: only for a remote run; {args.run_dir} ran in-process")


def _replay(run: StoredRun, args: argparse.Namespace) -> Check:
    from nudgeability.splice.replay import ReplayError, choose_units, replay_units

    units = run.units()
    remote = is_remote(run.manifest)
    if args.all:
        sample = None
    elif args.sample is not None:
        sample = args.sample
    elif remote:  # a server (perhaps a paid provider) is contacted only when asked
        return Check(
            "replay",
            SKIPPED,
            "a remote run is replayed only when asked (--sample K or --all): it sends requests "
            f"to {public_url(args.base_url or _endpoint(run))}",
        )
    else:
        sample = DEFAULT_SAMPLE
    if sample == 0:
        return Check("replay", SKIPPED, "--sample 0: no unit regenerated")
    overrides = {"data": args.data, "sentences": args.sentences}
    if remote:
        try:
            overrides["remote"] = remote_spec_of(
                run.manifest,
                base_url=args.base_url,
                tokenizer=args.tokenizer,
                api_key_env=args.api_key_env,
            )
        except (KeyError, TypeError) as exc:
            return Check("replay", FAIL, f"{run.root / MANIFEST}: field {exc} missing or malformed")
    else:
        overrides.update(model=args.model, device=args.device)
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
    return Check("replay", OK, f"{how} regenerated byte for byte: {names}", _moved(run, args))


def _moved(run: StoredRun, args: argparse.Namespace) -> tuple[str, ...]:
    """A replay on another device, or against another server, than the run's: a warning."""
    stored_device = run.manifest["config"].get("device")
    if args.device not in (None, stored_device):
        return (f"replayed on {args.device}, the run computed on {stored_device}",)
    if args.base_url not in (None, _endpoint(run)):
        url = public_url(args.base_url)
        return (f"replayed against {url}, the run was sent to {_endpoint(run)}",)
    return ()


def _endpoint(run: StoredRun) -> str | None:
    """The server URL a remote run was sent to (without credentials), as its manifest says."""
    endpoint = run.manifest.get("endpoint")
    return endpoint.get("base_url") if isinstance(endpoint, dict) else None
