"""`nudge run`: the flags, then `prepare` and `run` (splice/run/), then one line of result.

nudge run                                   # the embedded demo: SmolLM2 on 8 StrategyQA problems,
                                            # then its stats and report.html (runs/...-report/)
nudge run --task musique                    # the MuSiQue sample (3 problems; SmolLM2 gives n_S = 0)
nudge run --model DIR --task strategyqa --n 250 --max-new-tokens 4096,2048 --device cuda
nudge run ... --shard 2/8 --out runs/x-shard2  # one slice of a campaign (`nudge merge` joins them)
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from nudgeability.backends.names import APIS, BACKENDS, CONTINUE_FLAGS, PROMPT_FORMATS
from nudgeability.splice.run.config import default_out

from .run_flags import add_config_flags, config_from_args


def register(subparsers) -> None:
    """Add the `run` subcommand to the `nudge` parser."""
    run = subparsers.add_parser(
        "run",
        help="run the experiment: NT, B, the oracle base and every splice arm",
        description="Run NT, B (and oracle_B) for each drawn problem, then fork every splice arm from "
        "B's reasoning prefix, then (unless --no-report or --shard) write its stats and "
        "report.html. With no options: the embedded demo (SmolLM2 on 8 problems of the shipped "
        "StrategyQA set). Killed runs resume when started again with the same options.",
    )
    run.add_argument(
        "--out", help="output directory (default: runs/<model>-<task>-<decoding>[-shardKofN])"
    )
    add_config_flags(run)
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    run.add_argument(
        "--no-report",
        action="store_true",
        help="only the run: skip `nudge stats` and `nudge report` into OUT-report/ "
        "(a shard never runs them: its stats would be partial)",
    )
    _register_remote(run)
    run.set_defaults(func=_run)


def _register_remote(run) -> None:
    """The flags of `--backend openai`: a server instead of the in-process engine (README,
    "Run against a server or a provider")."""
    group = run.add_argument_group("running against a server (--backend openai)")
    group.add_argument(
        "--backend",
        choices=BACKENDS,
        default="local",
        help="local: the in-process engine (default); openai: an OpenAI-compatible server",
    )
    group.add_argument("--base-url", help="the server's OpenAI base URL, e.g. http://host:8000/v1")
    group.add_argument(
        "--api",
        choices=APIS,
        default="completions",
        help="completions: /v1/completions (default); chat: /v1/chat/completions, continuing a "
        "partial assistant turn",
    )
    group.add_argument(
        "--prompt-format",
        choices=PROMPT_FORMATS,
        default="token",
        help="completions: send token ids and read ids back (token, default: vLLM, SGLang, "
        "llama-server) or the rendered text (text: transformers serve); text is text-level",
    )
    group.add_argument(
        "--chat-continue",
        choices=CONTINUE_FLAGS,
        default="continue_final_message",
        help="chat: how the partial assistant turn is marked: vLLM's continue_final_message "
        "(default) or a provider's prefix flag",
    )
    group.add_argument(
        "--tokenizer",
        help="the model's tokenizer: a directory or a repo id in the local HF cache "
        "(default: --model)",
    )
    group.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="the environment variable holding the API key (never written anywhere)",
    )
    group.add_argument(
        "--served-model",
        metavar="NAME",
        help="the model id the server's answers name when it is not --model: a provider's dated "
        "snapshot, e.g. --model gpt-4o --served-model gpt-4o-2024-08-06 (recorded in the "
        "manifest; an answer naming any other model stops the run)",
    )
    group.add_argument(
        "--concurrency", type=int, default=8, help="requests in flight at most (default: 8)"
    )
    group.add_argument(
        "--request-timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds one request may take before it is retried (default: 600)",
    )
    group.add_argument(
        "--retry-backoff",
        type=float,
        default=0.5,
        metavar="S",
        help="base of the exponential backoff between retries, seconds (default: 0.5)",
    )


def remote_from_args(args: argparse.Namespace):
    """The `RemoteSpec` of `--backend openai`, or None for the in-process engine."""
    from nudgeability.splice.run.remote import remote_spec

    return remote_spec(
        args.backend,
        base_url=args.base_url,
        api=args.api,
        prompt_format=args.prompt_format,
        chat_continue=args.chat_continue,
        tokenizer=args.tokenizer,
        api_key_env=args.api_key_env,
        concurrency=args.concurrency,
        request_timeout=args.request_timeout,
        retry_backoff=args.retry_backoff,
        served_model=args.served_model,
    )


def _run(args: argparse.Namespace) -> int:
    from nudgeability.splice.run import shape as run_shape
    from nudgeability.splice.run.config import SERVER
    from nudgeability.splice.run.prepare import prepare
    from nudgeability.splice.run.runner import RunEngine, run
    from nudgeability.splice.run.validation import resolve_device
    from nudgeability.splice.rundir.manifest import UserInterventions
    from nudgeability.util.threads import set_threads, usable_cores

    requested = config_from_args(args)
    remote = remote_from_args(args)
    out = Path(args.out) if args.out else default_out(requested)
    device = SERVER if remote is not None else resolve_device(requested.device)
    # a resume reads the run's own interventions from its manifest, never running the file again
    recorded = UserInterventions.in_directory(out)
    engine = RunEngine(requested, device, recorded=recorded)
    # on CUDA the shape loads the model and settles the schedule (splice/run/shape.py)
    with quiet_transformers(args.quiet):
        shape = run_shape.settle(
            requested,
            device,
            out,
            cores=usable_cores(),
            workers=args.workers,
            threads=getattr(args, "threads", None),
            remote=remote is not None,
            pool_rows=engine.pool_rows,
            schedule=engine.schedule,
        )
    if shape.workers != 1:
        return _run_workers(args, requested, out, shape)
    set_threads(getattr(args, "threads", None))  # before prepare: the manifest records it
    with quiet_transformers(args.quiet):
        prepared = prepare(
            shape.config(requested), loaded=engine.loaded, remote=remote, recorded=recorded
        )
    if not args.quiet and prepared.backend is None:
        _announce(prepared)
    config = prepared.config
    result = run(prepared, out, progress=not args.quiet, engine=engine.engine, shape=shape)
    resolved = f", {result.resolutions} resolutions" if config.resolve else ""
    print(
        f"nudge run: {result.records} records{resolved} in {result.out} "
        f"({result.units_computed} units computed, {result.units_resumed} resumed)",
        file=sys.stderr,
    )
    if not args.no_report and config.shard is None:
        from .report import report_run

        report_run(Path(result.out))
    return 0


def _run_workers(args: argparse.Namespace, requested, out: Path, shape) -> int:
    from nudgeability.splice.run.workers import run_workers

    workers = shape.workers
    with quiet_transformers(args.quiet):
        result = run_workers(
            requested,
            out,
            shape,
            progress=not args.quiet,
            on_prepared=None if args.quiet else lambda whole: _announce(whole, workers),
        )
    print(f"nudge run: {result.records} records in {out} ({workers} workers)", file=sys.stderr)
    if not args.no_report:
        from .report import report_run

        report_run(out)
    return 0


def _announce(prepared, workers: int = 1) -> None:
    """The run's expected work and time, before it starts (costs/estimate/run_estimate.py)."""
    from nudgeability.costs.estimate.run_estimate import announcement

    print(announcement(prepared, workers), file=sys.stderr, flush=True)


@contextlib.contextmanager
def quiet_transformers(quiet: bool):
    """Hide transformers' own progress bars (weight loading) under --quiet, or when stderr is not
    a terminal (their redraw codes would garble a log), restoring them after."""
    from transformers.utils import logging

    from nudgeability.util.progress import is_terminal

    was_disabled = not logging.is_progress_bar_enabled()
    quiet = quiet or not is_terminal()
    if quiet:
        logging.disable_progress_bar()
    try:
        yield
    finally:
        if quiet and not was_disabled:
            logging.enable_progress_bar()
