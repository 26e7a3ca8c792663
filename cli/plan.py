"""`nudge plan`: what a run (or the paper's campaign) will cost here, before it runs.

nudge plan --task strategyqa --n 8            # the demo: measured here for a few seconds
nudge plan --model DIR --task musique --n 1000 --max-new-tokens 4096,2048 --device cuda
nudge plan --paper                            # the paper's nine models x two tasks on this device
nudge plan --from-run runs/pilot --n 1000     # lengths measured on a pilot run's records
nudge plan ... --json                         # one JSON object; `wall_seconds`, `gpu_hours`

It prepares the run as `nudge run` would and measures its engine (nudgeability.costs.estimate,
costs/README.md); the flags are `nudge run`'s.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone

from .run_flags import add_config_flags, config_from_args


def register(subparsers) -> None:
    plan = subparsers.add_parser(
        "plan",
        help="estimate a run's (or the paper campaign's) tokens, wall time and GPU-hours",
        description="Prepare the run `nudge run` would with these flags, measure its engine on "
        "this device for a few seconds (prefill rate, decode step at the rows the run reaches), "
        "and estimate its wall time; with --paper, the paper's whole open-weight campaign "
        "(nine models x two tasks, costs/estimate/paper_campaign.toml) on this device. Every "
        "assumption is printed.",
    )
    add_config_flags(plan)
    plan.add_argument(
        "--paper", action="store_true", help="also estimate the paper's whole campaign"
    )
    plan.add_argument(
        "--campaign",
        metavar="FILE",
        help="with --paper: another campaign file (default: the shipped paper_campaign.toml)",
    )
    plan.add_argument(
        "--from-run",
        metavar="DIR",
        help="measure the lengths (share of each budget generated, thinking closed) on a run's "
        "records instead of assuming the paper's",
    )
    plan.add_argument("--base-share", type=float, help="a base's mean new tokens / its budget")
    plan.add_argument("--arm-share", type=float, help="an arm's mean new tokens / its budget")
    plan.add_argument(
        "--at-budget",
        type=float,
        help="the share of bases and of arms that run to their budget (default 0; measured by "
        "--from-run)",
    )
    plan.add_argument("--json", action="store_true", help="print one JSON object")
    plan.set_defaults(func=_plan)


def _lengths(args: argparse.Namespace):
    from dataclasses import replace

    from nudgeability.costs.estimate import Lengths
    from nudgeability.costs.estimate.workload import lengths_from_run

    lengths = lengths_from_run(args.from_run) if args.from_run else Lengths()
    given = {  # flag -> its value and the fields it sets
        "--base-share": (args.base_share, ("base_share",)),
        "--arm-share": (args.arm_share, ("arm_share",)),
        "--at-budget": (args.at_budget, ("base_at_budget", "arm_at_budget")),
    }
    asked = {flag: v for flag, (v, _) in given.items() if v is not None}
    if asked:
        fields = {f: v for flag, (v, names) in given.items() if v is not None for f in names}
        said = ", ".join(f"{flag} {v:g}" for flag, v in asked.items())
        lengths = replace(lengths, **fields, source=f"{lengths.source}; {said}")
    return lengths


def _plan(args: argparse.Namespace) -> int:
    from nudgeability.costs.estimate import report
    from nudgeability.costs.estimate.campaign import load_campaign
    from nudgeability.costs.estimate.rates_cache import CachedRates, save_rates
    from nudgeability.costs.estimate.run_estimate import estimate_paper, estimate_run, measure_run

    config = config_from_args(args)
    lengths = _lengths(args)
    campaign = load_campaign(args.campaign) if args.paper else None
    from .run import quiet_transformers

    with quiet_transformers(args.json):
        measured = measure_run(
            config, lengths=lengths, workers=args.workers, threads=getattr(args, "threads", None)
        )
    run = estimate_run(config, lengths=lengths, measured=measured)
    kept = CachedRates(
        measured.rates,
        measured.max_rows,
        measured.reuse_stems,
        datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )
    save_rates(measured.prepared.config, kept)  # `nudge run` prints its estimate from them
    paper = estimate_paper(measured, campaign) if campaign is not None else None
    if args.json:
        print(json.dumps(report.as_json(run, paper), sort_keys=True))
    else:
        print(report.as_text(run, paper))
    sys.stdout.flush()
    return 0
