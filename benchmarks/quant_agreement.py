"""Q2: greedy agreement of each quantised format's compute paths with its exact path, SmolLM2 demo prompts.

    python benchmarks/quant_agreement.py [--n 16] [--new 64]

The prompts are the demo's (StrategyQA shipped sample, the first `--n` problems drawn with seed 0,
each rendered unaided and with the tool, as `nudge run --task strategyqa` renders them), so
2 n sequences per format. Each format is written from the embedded SmolLM2-135M (fp32) by the
package's writers, loaded with `exact`, `fused` (the fp32 kernels), `fused-bf16` (the libraries'
bf16 kernels) and `dense`, and decoded greedily for `--new` tokens (EOS ignored) through
`Engine.generate`, all sequences in one batch. A sequence agrees when its `--new` tokens are
identical to the exact path's.

The exact path run once more with the sequences in batches of three gives the noise floor: the
agreement when only the fp32 summation order changes (batch composition).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchkit.results import publish


def decode(model, tokenizer, prompts, new: int, batch: int | None = None) -> list[list[int]]:
    from nudgeability.engine import Engine, SamplingParams

    engine = Engine(model, tokenizer)
    params = SamplingParams(max_new_tokens=new, ignore_eos=True)
    size = batch or len(prompts)
    out = []
    for i in range(0, len(prompts), size):
        out += [c.token_ids for c in engine.generate(prompts[i : i + size], params)]
    return out


def agreement(a: list[list[int]], b: list[list[int]]) -> tuple[int, list[int]]:
    """(sequences identical, the first differing position of each that is not)."""
    firsts = [
        next(i for i, (x, y) in enumerate(zip(s, t)) if x != y) for s, t in zip(a, b) if s != t
    ]
    return len(a) - len(firsts), sorted(firsts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16, help="StrategyQA problems (2 prompts each)")
    parser.add_argument("--new", type=int, default=64, help="greedy tokens per sequence")
    args = parser.parse_args()

    import torch

    from nudgeability.models.families import detect_family
    from nudgeability.models.loader import load_model
    from nudgeability.models.quant import compute_paths, load_quantized
    from nudgeability.models.quant import writers as w
    from nudgeability.splice.experiment.prompts import render_prompts
    from nudgeability.splice.tasks import get_task, sample_problems

    torch.set_num_threads(1)
    fp32 = load_model("smollm2")
    task = get_task("strategyqa")
    problems = sample_problems(task.load(task.default_data_path()), args.n, 0)
    family = detect_family(fp32.source.directory, fp32.tokenizer)
    prompts = []
    for problem in problems:
        rendered = render_prompts(task, family, problem, False)
        prompts += [list(rendered.unaided), list(rendered.with_tool)]
    writers = {
        "FP8 128x128 (bf16 scales)": lambda d: w.write_fp8(fp32.model, d),
        "W4A16 group 32 (sym)": lambda d: w.write_w4a16(fp32.model, d, group_size=32),
        "BNB4 nf4 + double quant": lambda d: w.write_bnb4(fp32.model, d),
    }
    lines = [
        f"SmolLM2-135M-Instruct (fp32 activations), CPU, 1 thread. {len(prompts)} sequences: the "
        f"StrategyQA demo prompts of {args.n} problems (unaided and with the tool; "
        f"{min(map(len, prompts))}-{max(map(len, prompts))} prompt tokens), {args.new} greedy tokens "
        "each (EOS ignored), one `Engine.generate` batch. A sequence agrees when all its tokens equal "
        "the exact path's.",
        "",
        "| format | path | kernel (layers) | identical sequences | share | first divergences |",
        "|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name, write in writers.items():
            directory = Path(tmp) / name.split()[0]
            write(directory)
            exact_model = load_quantized(directory, compute="exact")
            exact = decode(exact_model, fp32.tokenizer, prompts, args.new)
            runs = {
                "exact, batches of 3": (
                    decode(exact_model, fp32.tokenizer, prompts, args.new, 3),
                    "-",
                )
            }
            del exact_model
            for compute in ("fused", "fused-bf16", "dense"):
                if compute == "fused-bf16" and name.startswith("FP8"):
                    continue  # no bf16 CPU kernel: the same kernels as fused
                model = load_quantized(directory, compute=compute)
                kernels = ", ".join(
                    f"{p} x{n}" for by in compute_paths(model).values() for p, n in by.items()
                )
                runs[compute] = (decode(model, fp32.tokenizer, prompts, args.new), kernels)
            for path, (tokens, kernels) in runs.items():
                same, firsts = agreement(exact, tokens)
                lines.append(
                    f"| {name} | {path} | {kernels} | {same}/{len(prompts)} | "
                    f"{same / len(prompts):.0%} | {', '.join(map(str, firsts)) or '-'} |"
                )
    lines += [
        "",
        "Target: fused identical to exact for >= 95% of sequences. *exact, batches of 3* is the exact "
        "path against itself with another batch composition (only the fp32 summation order differs): "
        "the agreement any non-bit-exact path can be expected to reach on these prompts. `fused` "
        "computes in fp32 (the libraries' weights exactly, other summation order); `fused-bf16` "
        "rounds activations and outputs to bf16 (FP8 has no bf16 kernel: there it is `fused`).",
    ]
    body = "\n".join(lines)
    publish("Q2 fused vs exact greedy agreement (benchmarks/quant_agreement.py)", body)


if __name__ == "__main__":
    main()
