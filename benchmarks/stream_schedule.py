"""The runner's two schedules side by side on one `nudge run`: the stream (splice/run/stream.py)
against one engine call per unit, phase after phase (the former barrier), same model, same config.

Prints wall time per schedule, the ratio, the engine's mean rows per decode step, and whether the
two wrote the same records.jsonl (and resolutions.jsonl) byte for byte; writes its section of
RESULTS.md. Run it alone on the machine (timed figures).

    python benchmarks/stream_schedule.py --n 16 --resolve

Both schedules run on `--threads` (default 1; the runner streams at any thread count where the
needle holds: splice/run/schedule.py); `--by-unit-threads` adds the by-unit schedule on that many
threads.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path

import torch

import nudgeability.splice.run.runner as runner
from nudgeability.bench.results import publish
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.prepare import prepare


def _timed(config: RunConfig, out: Path, schedule: str) -> dict:
    prepared = prepare(config)
    contexts = []
    make_context = runner.unit_context

    def unit_context(*args, **kwargs):  # keep the engine to read its step counts
        ctx = make_context(*args, **kwargs)
        ctx.backend.engine.stats = type(ctx.backend.engine.stats)(trace=[])
        contexts.append(ctx)
        return ctx

    runner.unit_context = unit_context
    try:
        start = time.perf_counter()
        runner.run(prepared, out, progress=False, schedule=schedule)
        seconds = time.perf_counter() - start
    finally:
        runner.unit_context = make_context
    trace = contexts[0].backend.engine.stats.trace
    decode = [step.rows for step in trace if step.rows and step.tokens == step.rows]
    digest = {
        name: hashlib.sha256((out / name).read_bytes()).hexdigest()
        for name in ("records.jsonl", "resolutions.jsonl")
        if (out / name).exists()
    }
    return {
        "seconds": seconds,
        "steps": len(trace),
        "rows": sum(decode) / max(len(decode), 1),
        "digest": digest,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="strategyqa")
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--chunk-size", type=int, default=32)
    parser.add_argument("--max-new-tokens", default="256,128")
    parser.add_argument("--resolve", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for both schedules")
    parser.add_argument(
        "--by-unit-threads",
        type=int,
        default=2,
        help="also time the by-unit schedule on this many threads (what `nudge run` does there); 0: not",
    )
    args = parser.parse_args()
    base, arm = (int(x) for x in args.max_new_tokens.split(","))
    config = RunConfig(
        task=args.task,
        n=args.n,
        chunk_size=args.chunk_size,
        max_new_tokens=base,
        max_new_tokens_arm=arm,
        resolve=args.resolve,
        device="cpu",
    )
    with tempfile.TemporaryDirectory() as tmp:
        torch.set_num_threads(args.threads)
        units = _timed(config, Path(tmp) / "units", "units")
        stream = _timed(config, Path(tmp) / "stream", "stream")
        rows = [
            (f"by unit (the former barrier), {args.threads} thread(s)", units),
            (f"stream, {args.threads} thread(s)", stream),
        ]
        if args.by_unit_threads:
            torch.set_num_threads(args.by_unit_threads)
            wide = _timed(config, Path(tmp) / "wide", "units")
            rows.append((f"by unit, {args.by_unit_threads} thread(s)", wide))
    same = units["digest"] == stream["digest"]
    table = [
        "| schedule | wall s | engine steps | mean rows per decode step |",
        "|---|---|---|---|",
    ]
    for name, r in rows:
        table.append(f"| {name} | {r['seconds']:.1f} | {r['steps']} | {r['rows']:.1f} |")
    ratio = units["seconds"] / stream["seconds"]
    lines = [
        f"SmolLM2 fp32, {args.task}, n = {args.n}, chunk size {args.chunk_size}, budgets "
        f"{args.max_new_tokens}{', --resolve' if args.resolve else ''}, every condition, "
        "greedy; one process, in the order of the table.",
        "",
        *table,
        "",
        f"On {args.threads} thread(s) the stream is **{ratio:.2f}×** the by-unit schedule's speed; "
        f"records{' and resolutions' if args.resolve else ''} byte-identical: **{same}**.",
    ]
    if args.by_unit_threads:
        wide_ratio = rows[-1][1]["seconds"] / stream["seconds"]
        lines.append(
            f"Against the by-unit schedule on {args.by_unit_threads} thread(s) (where `nudge run` "
            f"does not stream: splice/run/runner.py `streams`), the stream is {wide_ratio:.2f}×."
        )
    body = "\n".join(lines)
    publish("Runner schedules: stream against one call per unit", body)


if __name__ == "__main__":
    main()
