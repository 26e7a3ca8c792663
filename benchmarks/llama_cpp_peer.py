"""llama.cpp as a peer: Engine.fork against llama.cpp (llama-cpp-python) on the same GGUF SmolLM2 file.

    pip install -e '.[bench]'      # builds llama-cpp-python from source: 15+ minutes on 2 cores
    python benchmarks/llama_cpp_peer.py [--arms 12] [--prefix 1024] [--new 48]

Same arms, greedy, side by side in one process. llama.cpp gets its own prefix reuse: the prefix is
evaluated once, its state saved, and restored before each arm. It computes with the Q4_1 weights
as stored; the engine runs the fp32 dequantised model, so their greedy tokens are reported, not
asserted, to agree.
"""

from __future__ import annotations

import time

import numpy as np
from benchkit.results import publish
from benchkit.splice_runs import workload_parser

from nudgeability.costs.splice_workload import splice_workload
from nudgeability.engine import Engine, SamplingParams
from nudgeability.models import smollm2
from nudgeability.models.loader import load_model


def last_logits(llm) -> np.ndarray:
    # Without logits_all, llama-cpp-python keeps no scores; read the context's last-token logits.
    return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))


def llama_cpp_arms(llm, prefix, suffixes, new):
    llm.reset()
    llm.eval(prefix)
    state = llm.save_state()
    out = []
    for suffix in suffixes:
        llm.load_state(state)
        llm.eval(suffix)
        tokens = []
        for _ in range(new):
            token = int(np.argmax(last_logits(llm)))
            tokens.append(token)
            llm.eval([token])
        out.append(tokens)
    return out


def main():
    args = workload_parser(__doc__.splitlines()[0]).parse_args()
    try:
        from llama_cpp import Llama
        from llama_cpp import __version__ as llama_cpp_version
    except ImportError as exc:
        raise SystemExit(
            f"llama-cpp-python is not installed ({exc}); install the bench extra: pip install -e '.[bench]'"
        ) from exc
    import torch

    lm = load_model("smollm2")
    engine = Engine(lm.model, lm.tokenizer)
    w = splice_workload(lm.tokenizer, args.prefix, args.arms)
    threads = torch.get_num_threads()
    llm = Llama(
        model_path=str(smollm2.find_gguf()),
        n_ctx=args.prefix + 64 + args.new,
        n_threads=threads,
        n_batch=512,
        verbose=False,
    )
    params = SamplingParams(max_new_tokens=args.new, ignore_eos=True)
    engine.fork(w.prefix[:64], w.suffixes[:2], SamplingParams(max_new_tokens=4))  # warm-up
    llama_cpp_arms(llm, w.prefix[:64], w.suffixes[:2], 4)

    t0 = time.perf_counter()
    ours = [a.token_ids for a in engine.fork(w.prefix, w.suffixes, params)]
    t_engine = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = llama_cpp_arms(llm, w.prefix, w.suffixes, args.new)
    t_llama = time.perf_counter() - t0

    same_arms = sum(a == b for a, b in zip(ours, theirs))
    first_diff = [
        next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
        for a, b in zip(ours, theirs)
    ]
    body = "\n".join(
        [
            f"SmolLM2-135M-Instruct, CPU, {threads} threads. {args.arms} arms, prefix {args.prefix} tokens, "
            f"{args.new} new tokens each, greedy. llama-cpp-python {llama_cpp_version} (Q4_1 weights, state save/restore "
            "for the prefix) against Engine.fork (fp32 weights dequantised from the same GGUF).",
            "",
            "| system | wall time |",
            "|---|---|",
            f"| Engine.fork | {t_engine:.2f} s |",
            f"| llama.cpp | {t_llama:.2f} s |",
            "",
            f"- **engine ÷ llama.cpp wall time = {t_engine / t_llama:.2f}** (below 1: the engine is faster).",
            f"- Greedy agreement (reported, not asserted: Q4_1 vs fp32): {same_arms}/{args.arms} arms identical; "
            f"tokens agreeing before the first difference, per arm: {first_diff}.",
        ]
    )
    publish("llama.cpp as a peer (benchmarks/llama_cpp_peer.py)", body, write=not args.no_write)


if __name__ == "__main__":
    main()
