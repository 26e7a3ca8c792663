"""Remote against local: the splice workload (12 arms on a 1,024-token prefix, 48 new tokens) three ways.

    python benchmarks/remote_vs_local.py [--arms 12] [--prefix 1024] [--new 48] [--concurrency 4]

(a) the in-process engine (`Engine.fork`), (b) the `/v1/completions` backend in text mode against
HF `transformers serve` on the same SmolLM2 checkpoint, (c) the backend in token mode against
llama.cpp's `llama-server` on the embedded GGUF, where `llama-server` is on PATH. The servers are
started by the script on free local ports and stopped after.

For each: wall time of the fork call, arms/s, new tokens, the prompt tokens the server reported
serving from its prefix cache, and the client's own overhead: the wall time during which no
request was in flight (building requests, parsing answers, re-encoding text), as a share of the
wall time -- the issue asks for under 5%. Each remote way runs one warm-up fork first, so the
model load and first-request costs are not counted.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchkit.results import publish
from benchkit.servers import free_port, llama_server_command, remote_fork, serving
from benchkit.splice_runs import workload_parser

from nudgeability.costs.splice_workload import splice_workload
from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.families import get_family
from nudgeability.models.loader import load_model
from nudgeability.models.smollm2 import converted_dir, find_gguf


def main() -> None:
    ap = workload_parser(__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=4)
    args = ap.parse_args()

    loaded = load_model("smollm2")
    family = get_family("chatml", loaded.tokenizer)
    workload = splice_workload(loaded.tokenizer, args.prefix, args.arms)
    params = SamplingParams(max_new_tokens=args.new, ignore_eos=True)
    rows = {}

    engine = Engine(loaded.model, loaded.tokenizer)
    engine.fork(workload.prefix, workload.suffixes[:1], SamplingParams(max_new_tokens=2))  # warm-up
    start_time = time.perf_counter()
    arms = engine.fork(workload.prefix, workload.suffixes, params)
    wall = time.perf_counter() - start_time
    tokens = sum(len(a.token_ids) for a in arms)
    rows["(a) in-process Engine.fork"] = {
        "wall": wall,
        "tokens": tokens,
        "cached": None,
        "overhead": None,
        "level": "token",
    }
    del engine, loaded

    logs = Path(tempfile.mkdtemp(prefix="remote-bench-"))
    port = free_port()
    serve = shutil.which("transformers", path=str(Path(sys.executable).parent)) or "transformers"
    command = [serve, "serve", str(converted_dir(find_gguf())), "--device", "cpu"]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    with serving(command, port, logs / "serve.log") as model:
        rows["(b) completions, text mode, transformers serve"] = remote_fork(
            port, model, family, "text", workload, params, args.concurrency
        )

    if shutil.which("llama-server"):
        port = free_port()
        arm_tokens = args.prefix + 64 + args.new  # 64: room for the suffix
        command = llama_server_command(find_gguf(), port, arm_tokens, args.concurrency)
        with serving(command, port, logs / "llama.log") as model:
            rows["(c) completions, token mode, llama-server"] = remote_fork(
                port, model, family, "token", workload, params, args.concurrency
            )
    else:
        print("llama-server is not on PATH: way (c) skipped", file=sys.stderr)

    lines = [
        f"{args.arms} arms on a {args.prefix}-token prefix, {args.new} new tokens each (greedy; "
        f"the engine and llama-server ignore EOS, transformers serve cannot), SmolLM2-135M on CPU, "
        f"client concurrency {args.concurrency}. The ways run one after the other. The engine and "
        "transformers serve compute in fp32 (the GGUF dequantised); llama-server runs the GGUF's "
        "Q4_1 weights directly, with its own threads, so its row is a throughput reference, not "
        "the same arithmetic.",
        "",
        "| Way | Wall (s) | Arms/s | New tokens | Cached prefix tokens | Client overhead | Continuation |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        cached = "not reported" if row["cached"] is None else str(row["cached"])
        overhead = "–" if row["overhead"] is None else f"{100 * row['overhead']:.1f}%"
        lines.append(
            f"| {name} | {row['wall']:.2f} | {args.arms / row['wall']:.2f} | {row['tokens']} "
            f"| {cached} | {overhead} | {row['level']} |"
        )
    body = "\n".join(lines)
    publish("Remote against local (benchmarks/remote_vs_local.py)", body, write=not args.no_write)


if __name__ == "__main__":
    main()
