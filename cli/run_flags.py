"""The flags that say which run: `nudge run` takes them, and `nudge plan` estimates the run they
ask for (cli/run.py, cli/plan.py), parsed into a `RunConfig` (splice/run/config.py) here."""

from __future__ import annotations

import argparse

from nudgeability.splice.run.config import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_N_OF_TASK,
    DEFAULT_RETRIEVE_K,
    DEMO_TASK,
    RunConfig,
    default_n,
)

from .values import parse_max_new_tokens, parse_n, parse_seeds, parse_shard

_DEFAULT_TOKENS = ",".join(map(str, DEFAULT_MAX_NEW_TOKENS))


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of a run's config, its threads and its workers."""
    parser.add_argument(
        "--model",
        default="smollm2",
        help="'smollm2' (embedded), a checkpoint directory, "
        "a .gguf file or a repo id already in the local HF cache (default: smollm2)",
    )
    parser.add_argument(
        "--task", default=DEMO_TASK, help=f"musique or strategyqa (default: {DEMO_TASK})"
    )
    parser.add_argument(
        "--data", help="the official data file (default: the task's shipped sample)"
    )
    parser.add_argument(
        "--n",
        default=None,
        help="problems to draw, or 'all' (default: "
        + ", ".join(f"{n} for {task}" for task, n in DEFAULT_N_OF_TASK.items())
        + ")",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the problem draw (default: 0)")
    parser.add_argument(
        "--decoding",
        default="greedy",
        help="greedy, or sampled: temperature 1.0, top-p 0.95 (default: greedy)",
    )
    parser.add_argument(
        "--seeds",
        help="decoding seeds of a sampled run, e.g. 0,1,2 (the default); each is a full replicate",
    )
    parser.add_argument(
        "--conditions",
        default="all",
        help="condition codes and presets (primary, voices, "
        "sealed, oracle, all), comma-separated (default: all)",
    )
    parser.add_argument(
        "--max-new-tokens",
        default=_DEFAULT_TOKENS,
        metavar="BASE[,ARM]",
        help=f"token budget of the bases, and of each arm after the splice (default: {_DEFAULT_TOKENS})",
    )
    parser.add_argument(
        "--shard",
        metavar="K/N",
        help="compute only shard K of N (whole chunks of problems); "
        "join the shards with `nudge merge`",
    )
    parser.add_argument(
        "--family", help="model family, overriding detection: qwen3, glm_z1, gemma4, chatml"
    )
    parser.add_argument(
        "--sentences", help="the sentences file (default: the shipped sentences.toml)"
    )
    parser.add_argument(
        "--interventions",
        metavar="FILE",
        help="a TOML, JSON or Python file of interventions, arms added to the conditions "
        "(splice/README.md, *Your own interventions*)",
    )
    parser.add_argument(
        "--dtype",
        default=None,
        help="float32, bfloat16 or float16 (default: float32 on CPU; on CUDA the checkpoint's "
        "own: bfloat16 for bf16, FP8, W4A16, BNB4 and fp32 checkpoints, float16 for fp16 ones)",
    )
    parser.add_argument(
        "--device", help="cpu, cuda or cuda:N (default: cuda if available, else cpu)"
    )
    parser.add_argument(
        "--quant-compute",
        help="a quantised checkpoint's linears: fused (default: low-bit kernels), exact (dequantise "
        "each forward, bit for bit as the format's library) or dense (dequantise once at load: exact "
        "and fast, full-precision memory)",
    )
    parser.add_argument(
        "--max-batch-tokens",
        type=int,
        help="the engine's KV pool in token slots (memory budget; default: grows with the work on "
        "CPU, --gpu-memory-utilization of the free memory on CUDA)",
    )
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        metavar="FRACTION",
        help="CUDA: the share of free device memory the KV pool takes at start, in (0, 1] "
        "(default: 0.9; not with --max-batch-tokens)",
    )
    parser.add_argument(
        "--static-decode",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="decode steps on fixed shapes, replayed as CUDA graphs (default: on with CUDA, where "
        "an eager step waits on the host; --no-static-decode runs the eager cascade; records "
        "differ between the two in a logit's last bits)",
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        help="problems per unit of work: the resume and shard granularity (default: "
        f"{DEFAULT_CHUNK_SIZE}; on CUDA by unit the rows the KV pool holds, recorded at a fresh "
        "start and kept on resume)",
    )
    parser.add_argument(
        "--consistency-samples",
        type=int,
        default=0,
        metavar="K",
        help="K unaided samples per problem at T=1.0, top-p 0.95 for the self-consistency signal "
        "(default: 0, none)",
    )
    parser.add_argument(
        "--signals",
        action="store_true",
        help="store B's token uncertainty and hidden state at the cut (on with "
        "--consistency-samples)",
    )
    parser.add_argument(
        "--likelihoods",
        action="store_true",
        help="record each arm's splice log-probabilities (total, per token) and on sealed arms "
        "P(TOOL), P(answer): the action openers' probabilities after the think-close",
    )
    parser.add_argument(
        "--score-openers",
        default=None,
        metavar="CODES",
        help="with --likelihoods: also score these arms' openers (codes), after a think-close",
    )
    parser.add_argument(
        "--cuts",
        default=None,
        metavar="SPEC",
        help="also fork every arm at these cuts of each base's reasoning: all (after every "
        "sentence), fractions such as 0.25,0.5,0.75, or sentences:3,7 (after those sentences)",
    )
    parser.add_argument(
        "--samples-per-arm",
        type=int,
        default=1,
        metavar="N",
        help="with --decoding sampled: decode every arm N times from its cut, each sample from "
        "its own random stream (default: 1)",
    )
    parser.add_argument(
        "--resolve",
        action="store_true",
        help="then execute every TOOL record's call on the task's offline tools, let the model "
        "finish and grade its final answer (resolutions.jsonl; see README, Delegation value)",
    )
    parser.add_argument(
        "--retrieve-k",
        type=int,
        default=None,
        metavar="K",
        help="with --resolve: paragraphs MuSiQue's retrieve returns "
        f"(default: {DEFAULT_RETRIEVE_K}, as its prompt says)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads (default: torch's choice); give each process sharing a machine "
        "its own share of the cores (README: Sharding); one process then, not the default workers",
    )
    parser.add_argument(
        "--workers",
        type=int,
        help="CPU runs: N single-threaded processes, each a shard of the run, forked after the "
        "model loads (one copy of the weights) and merged into OUT; records byte for byte the "
        "one-process run's (default: one per core on a CPU run without --threads; 1: one "
        "process on every core)",
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
        interventions=args.interventions,
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
        cuts=args.cuts,
        samples_per_arm=args.samples_per_arm,
        score_openers=tuple(args.score_openers.split(",")) if args.score_openers else (),
        resolve=args.resolve,
        retrieve_k=args.retrieve_k,
    )
