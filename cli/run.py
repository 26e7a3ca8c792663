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
from nudgeability.splice.run.config import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_N_OF_TASK,
    DEFAULT_RETRIEVE_K,
    DEMO_TASK,
    RunConfig,
    default_n,
    default_out,
)

from .values import parse_max_new_tokens, parse_n, parse_seeds, parse_shard

_DEFAULT_TOKENS = ",".join(map(str, DEFAULT_MAX_NEW_TOKENS))


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
        "--model",
        default="smollm2",
        help="'smollm2' (embedded), a checkpoint directory, "
        "a .gguf file or a repo id already in the local HF cache (default: smollm2)",
    )
    run.add_argument(
        "--task", default=DEMO_TASK, help=f"musique or strategyqa (default: {DEMO_TASK})"
    )
    run.add_argument("--data", help="the official data file (default: the task's shipped sample)")
    run.add_argument(
        "--n",
        default=None,
        help="problems to draw, or 'all' (default: "
        + ", ".join(f"{n} for {task}" for task, n in DEFAULT_N_OF_TASK.items())
        + ")",
    )
    run.add_argument("--seed", type=int, default=0, help="seed of the problem draw (default: 0)")
    run.add_argument(
        "--decoding",
        default="greedy",
        help="greedy, or sampled: temperature 1.0, top-p 0.95 (default: greedy)",
    )
    run.add_argument(
        "--seeds",
        help="decoding seeds of a sampled run, e.g. 0,1,2 (the default); each is a full replicate",
    )
    run.add_argument(
        "--conditions",
        default="all",
        help="condition codes and presets (primary, voices, "
        "sealed, oracle, all), comma-separated (default: all)",
    )
    run.add_argument(
        "--max-new-tokens",
        default=_DEFAULT_TOKENS,
        metavar="BASE[,ARM]",
        help=f"token budget of the bases, and of each arm after the splice (default: {_DEFAULT_TOKENS})",
    )
    run.add_argument(
        "--out", help="output directory (default: runs/<model>-<task>-<decoding>[-shardKofN])"
    )
    run.add_argument(
        "--shard",
        metavar="K/N",
        help="compute only shard K of N (whole chunks of problems); "
        "join the shards with `nudge merge`",
    )
    run.add_argument(
        "--family", help="model family, overriding detection: qwen3, glm_z1, gemma4, chatml"
    )
    run.add_argument("--sentences", help="the sentences file (default: the shipped sentences.toml)")
    run.add_argument(
        "--dtype",
        default=None,
        help="float32, bfloat16 or float16 (default: float32 on CPU; on CUDA the checkpoint's "
        "own: bfloat16 for bf16, FP8, W4A16, BNB4 and fp32 checkpoints, float16 for fp16 ones)",
    )
    run.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if available, else cpu)")
    run.add_argument(
        "--quant-compute",
        help="a quantised checkpoint's linears: fused (default: low-bit kernels), exact (dequantise "
        "each forward, bit for bit as the format's library) or dense (dequantise once at load: exact "
        "and fast, full-precision memory)",
    )
    run.add_argument(
        "--max-batch-tokens",
        type=int,
        help="the engine's KV pool in token slots (memory budget; default: grows with the work on "
        "CPU, --gpu-memory-utilization of the free memory on CUDA)",
    )
    run.add_argument(
        "--gpu-memory-utilization",
        type=float,
        metavar="FRACTION",
        help="CUDA: the share of free device memory the KV pool takes at start, in (0, 1] "
        "(default: 0.9; not with --max-batch-tokens)",
    )
    run.add_argument(
        "--static-decode",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="decode steps on fixed shapes, replayed as CUDA graphs (default: on with CUDA, where "
        "an eager step waits on the host; --no-static-decode runs the eager cascade; records "
        "differ between the two in a logit's last bits)",
    )
    run.add_argument(
        "--chunk-size",
        type=int,
        help="problems per unit of work: the resume and shard granularity (default: "
        f"{DEFAULT_CHUNK_SIZE}; on CUDA the rows the KV pool holds, recorded at a fresh start "
        "and kept on resume)",
    )
    run.add_argument(
        "--consistency-samples",
        type=int,
        default=0,
        metavar="K",
        help="K unaided samples per problem at T=1.0, top-p 0.95 for the self-consistency signal "
        "(default: 0, none)",
    )
    run.add_argument(
        "--signals",
        action="store_true",
        help="store B's token uncertainty and hidden state at the cut (on with "
        "--consistency-samples)",
    )
    run.add_argument(
        "--likelihoods",
        action="store_true",
        help="record each arm's splice log-probabilities (total, per token) and on sealed arms "
        "P(TOOL), P(answer): the action openers' probabilities after the think-close",
    )
    run.add_argument(
        "--score-openers",
        default=None,
        metavar="CODES",
        help="with --likelihoods: also score these arms' openers (codes), after a think-close",
    )
    run.add_argument(
        "--resolve",
        action="store_true",
        help="then execute every TOOL record's call on the task's offline tools, let the model "
        "finish and grade its final answer (resolutions.jsonl; see README, Delegation value)",
    )
    run.add_argument(
        "--retrieve-k",
        type=int,
        default=None,
        metavar="K",
        help="with --resolve: paragraphs MuSiQue's retrieve returns "
        f"(default: {DEFAULT_RETRIEVE_K}, as its prompt says)",
    )
    run.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads (default: torch's choice); give each process sharing a machine "
        "its own share of the cores (README: Sharding); one process then, not the default workers",
    )
    run.add_argument(
        "--workers",
        type=int,
        help="CPU runs: N single-threaded processes, each a shard of the run, forked after the "
        "model loads (one copy of the weights) and merged into OUT; records byte for byte the "
        "one-process run's (default: one per core on a CPU run without --threads; 1: one "
        "process on every core)",
    )
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


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The run `nudge run`'s arguments ask for, unresolved (ConfigError naming a bad flag)."""
    base_budget, arm_budget = parse_max_new_tokens(args.max_new_tokens)
    return RunConfig(
        model=args.model,
        task=args.task,
        data=args.data,
        n=parse_n(args.n) if args.n is not None else default_n(args.task),
        sample_seed=args.seed,
        decoding=args.decoding,
        seeds=None if args.seeds is None else parse_seeds(args.seeds),
        conditions=tuple(args.conditions.split(",")),
        max_new_tokens=base_budget,
        max_new_tokens_arm=arm_budget,
        family=args.family,
        sentences=args.sentences,
        dtype=args.dtype,
        device=args.device,
        quant_compute=args.quant_compute,
        max_batch_tokens=args.max_batch_tokens,
        gpu_memory_utilization=args.gpu_memory_utilization,
        static_decode=args.static_decode,
        chunk_size=args.chunk_size,
        shard=None if args.shard is None else parse_shard(args.shard),
        consistency_samples=args.consistency_samples,
        signals=args.signals,
        likelihoods=args.likelihoods,
        score_openers=tuple(args.score_openers.split(",")) if args.score_openers else (),
        resolve=args.resolve,
        retrieve_k=args.retrieve_k,
    )


def _run(args: argparse.Namespace) -> int:
    from nudgeability.splice.run.prepare import prepare
    from nudgeability.splice.run.runner import resumed_chunk_size, run
    from nudgeability.util.threads import set_threads

    requested = config_from_args(args)
    remote = remote_from_args(args)
    requested = resumed_chunk_size(requested, _out(args, requested))  # splice/run/runner.py
    workers = _workers(args, requested, remote)
    if workers != 1:
        return _run_workers(args, requested, workers)
    set_threads(getattr(args, "threads", None))  # before prepare: the manifest records it
    with _quiet_transformers(args.quiet):
        prepared = prepare(requested, remote=remote)
    config = prepared.config
    out = Path(args.out) if args.out else default_out(config)
    result = run(prepared, out, progress=not args.quiet)
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


def _workers(args: argparse.Namespace, requested, remote) -> int:
    from nudgeability.splice.run.workers import worker_count
    from nudgeability.util.threads import usable_cores

    return worker_count(
        requested,
        _out(args, requested),
        usable_cores(),
        workers=args.workers,
        threads=getattr(args, "threads", None),
        remote=remote is not None,
    )


def _out(args: argparse.Namespace, requested) -> Path:
    return Path(args.out) if args.out else default_out(requested)


def _run_workers(args: argparse.Namespace, requested, workers: int) -> int:
    from nudgeability.splice.run.workers import run_workers

    out = _out(args, requested)
    with _quiet_transformers(args.quiet):
        result = run_workers(requested, out, workers, progress=not args.quiet)
    print(f"nudge run: {result.records} records in {out} ({workers} workers)", file=sys.stderr)
    if not args.no_report:
        from .report import report_run

        report_run(out)
    return 0


@contextlib.contextmanager
def _quiet_transformers(quiet: bool):
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
