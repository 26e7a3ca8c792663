"""Q3: the P1 splice workload on a W4A16 SmolLM2: the engine on each compute path, HF generate()
per arm on the same checkpoint loaded by transformers, and llama-server on the GGUF's Q4_1.

    python benchmarks/quant_workload.py [--arms 12] [--prefix 1024] [--new 48] [--threads 1]

The W4A16 checkpoint (group 32, symmetric) is written from the embedded SmolLM2-135M (fp32) by
the package's writer (compressed-tensors' own compressor). Side by side in one process, greedy,
EOS ignored, one after the other on `--threads` threads:

- (a) `Engine.fork` on `load_quantized(..., compute=)` for `fused` (fp32 kernels), `fused-bf16`
  (torch's int4 kernel) and `exact`, and on the fp32 model for scale;
- (b) HF `generate()` once per arm (prefix + suffix) on the checkpoint loaded by
  `AutoModelForCausalLM.from_pretrained` (transformers' compressed-tensors integration);
- (c) llama-server (where it is on PATH) on the embedded GGUF, whose weights are Q4_1, through the
  completions backend in token mode (benchmarks/remote_vs_local.py starts it), `-t --threads`.

Reported: wall time, ratios to (a) fused, and how many arms give the same tokens as (a) fused.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import torch

from nudgeability.bench.results import publish
from nudgeability.bench.servers import free_port, llama_server_command, remote_fork, serving
from nudgeability.bench.workload import (
    Workload,
    run_fork,
    run_hf_per_arm,
    splice_workload,
    timed,
    workload_parser,
)
from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.families import get_family
from nudgeability.models.loader import load_model
from nudgeability.models.quant import compute_paths, load_quantized, write_w4a16
from nudgeability.models.smollm2 import find_gguf


def llama_server_fork(args, family, workload, params, logs: Path) -> dict:
    port = free_port()
    arm_tokens = args.prefix + 64 + args.new  # 64: room for the suffix
    command = llama_server_command(find_gguf(), port, arm_tokens, args.concurrency)
    command += ["-t", str(args.threads), "-tb", str(args.threads)]
    with serving(command, port, logs / "llama.log") as model:
        return remote_fork(port, model, family, "token", workload, params, args.concurrency)


def main() -> None:
    ap = workload_parser(__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch (and llama-server) threads")
    ap.add_argument("--concurrency", type=int, default=4, help="llama-server slots and requests")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import warnings

    from transformers import AutoModelForCausalLM

    fp32 = load_model("smollm2")
    tok = fp32.tokenizer
    w = splice_workload(tok, args.prefix, args.arms)
    params = SamplingParams(max_new_tokens=args.new, ignore_eos=True)
    rows: dict[str, dict] = {}
    tmp = Path(tempfile.mkdtemp(prefix="quant-workload-"))
    directory = write_w4a16(fp32.model, tmp / "w4a16", group_size=32, tokenizer=tok)

    def engine_row(name: str, model) -> list[list[int]]:
        engine = Engine(model, tok)
        run_fork(engine, splice_workload(tok, 64, 2), 4)  # warm-up: kernels compiled or loaded
        seconds, tokens = timed(run_fork, engine, w, args.new)
        rows[name] = {"wall": seconds, "tokens": tokens}
        return tokens

    engine_row("(a) Engine.fork, fp32 model (scale)", fp32.model)
    rows["(a) Engine.fork, fp32 model (scale)"]["tokens"] = None  # other weights: not compared
    paths = {}
    for compute in ("fused", "fused-bf16", "exact"):
        model = load_quantized(directory, compute=compute)
        paths[compute] = ", ".join(
            f"{p} x{n}" for by in compute_paths(model).values() for p, n in by.items()
        )
        engine_row(f"(a) Engine.fork, W4A16 {compute} ({paths[compute]})", model)
        del model
    reference = rows[f"(a) Engine.fork, W4A16 fused ({paths['fused']})"]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = AutoModelForCausalLM.from_pretrained(
            directory, dtype=torch.float32, device_map="cpu"
        ).eval()
    linear = theirs.model.layers[0].self_attn.q_proj
    held = ", ".join(sorted(linear.state_dict()))
    run_hf_per_arm(theirs, Workload(w.prefix[:64], w.suffixes[:2]), 2)  # warm-up
    seconds, tokens = timed(run_hf_per_arm, theirs, w, args.new)
    rows["(b) HF generate() per arm, transformers' compressed-tensors model"] = {
        "wall": seconds,
        "tokens": tokens,
    }
    del theirs

    if shutil.which("llama-server"):
        family = get_family("chatml", tok)
        result = llama_server_fork(args, family, w, params, tmp)
        rows["(c) llama-server, GGUF Q4_1, completions token mode"] = {
            "wall": result["wall"],
            "tokens": None,
            "cached": result["cached"],
        }
    else:
        print("llama-server is not on PATH: way (c) skipped", file=sys.stderr)

    lines = [
        f"SmolLM2-135M-Instruct, CPU, {args.threads} thread(s). The P1 workload: {args.arms} arms on "
        f"a {args.prefix}-token prefix (suffixes {min(map(len, w.suffixes))}-"
        f"{max(map(len, w.suffixes))} tokens), {args.new} new tokens each, greedy, EOS ignored. "
        "W4A16 = the package's compressed-tensors writer, group 32, symmetric. transformers "
        f"keeps the checkpoint's linears compressed (`{type(linear).__name__}` holding {held}) and "
        "decompresses them on each forward. llama-server computes with the GGUF's own Q4_1 weights "
        f"(not this W4A16 checkpoint: another quantisation, so its tokens are not compared), "
        f"{args.concurrency} slots.",
        "",
        "| way | wall (s) | vs (a) W4A16 fused | arms with the same tokens as (a) W4A16 fused |",
        "|---|---|---|---|",
    ]
    for name, row in rows.items():
        same = (
            "-"
            if row["tokens"] is None
            else f"{sum(a == b for a, b in zip(row['tokens'], reference['tokens']))}/{args.arms}"
        )
        lines.append(
            f"| {name} | {row['wall']:.2f} | {row['wall'] / reference['wall']:.2f}x | {same} |"
        )
    hf = rows["(b) HF generate() per arm, transformers' compressed-tensors model"]["wall"]
    lines += [
        "",
        f"- **HF generate() per arm / Engine.fork (W4A16 fused) = {hf / reference['wall']:.2f}x** "
        "on the same checkpoint.",
    ]
    body = "\n".join(lines)
    publish("Q3 P1 workload on W4A16 (benchmarks/quant_workload.py)", body, write=not args.no_write)


if __name__ == "__main__":
    main()
