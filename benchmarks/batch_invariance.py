"""Batch invariance on this CPU: which operations give a row other bits in another batch, and
whether the engine's logits do.

    python benchmarks/batch_invariance.py [--no-smollm2]

1. **Operations** (SmolLM2's real weights and shapes): a row's result alone against the same row at
   a random position among M rows, and every row of a block of M rows against the same rows at
   M = 64, for the matrix products (a linear of each shape, the LM head),
   the fused attention kernel (folded query rows; keys padded with masked ones, to a multiple of
   16 or not) and an elementwise transcendental (sigmoid) at every position of a tensor. Each cell
   lists the classes of M (or key count, or position) whose results are bitwise the same.
2. **The engine** (vLLM's needle test): one prompt alone against the same prompt at a random
   position among 2-64 others, greedy, 12 new tokens; for each model and dtype, with the
   engine's row padding (`batch_invariant=True`, the default) and without it: in how many of the
   batches the logits are bitwise those of the prompt alone, and the largest difference.

Not timed: run it beside other work. Writes its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import random

import torch
import torch.nn.functional as F
from benchkit.results import publish

from nudgeability.engine import Engine, SamplingParams
from nudgeability.models.testing.tiny import ARCHITECTURES, tiny_model

BATCHES = (2, 3, 5, 8, 16, 17, 33, 64)


def classes(values: dict) -> str:
    """`{key: tensor}` -> the groups of keys whose tensors are bitwise equal, as ranges."""
    groups: list[tuple[torch.Tensor, list]] = []
    for key, value in values.items():
        for ref, members in groups:
            if ref.shape == value.shape and torch.equal(ref, value):
                members.append(key)
                break
        else:
            groups.append((value, [key]))
    return " · ".join("{" + _span(members) + "}" for _, members in groups)


def _span(keys: list) -> str:
    if len(keys) <= 3:
        return ", ".join(map(str, keys))
    return f"{keys[0]}, {keys[1]}, …, {keys[-1]} ({len(keys)})"


def linear_classes(weight: torch.Tensor, rows=(1, 2, 3, 8, 15, 16, 17, 32, 33, 64, 128, 257, 512)):
    rng = random.Random(0)
    needle = torch.randn(
        1, weight.shape[1], dtype=weight.dtype, generator=torch.Generator().manual_seed(1)
    )
    out = {}
    for m in rows:
        x = torch.randn(
            m, weight.shape[1], dtype=weight.dtype, generator=torch.Generator().manual_seed(m)
        )
        at = rng.randrange(m)
        x[at] = needle[0]
        with torch.inference_mode():
            out[m] = F.linear(x, weight)[at]
    return classes(out)


def linear_rows(weight: torch.Tensor, rows=(16, 17, 24, 32, 33, 36, 37, 48, 65, 96, 128, 160)):
    """Every row, not one needle: rows 0-63 of M >= 16 rows (what the engine's padded forwards run)
    against the same rows at M = 64. A single needle row can sit where the kernel happens to sum
    alike; this counts the rows whose bits change, and at which M."""
    x = torch.randn(max(rows), weight.shape[1], generator=torch.Generator().manual_seed(0))
    x = x.to(weight.dtype)
    with torch.inference_mode():
        ref = F.linear(x[:64], weight)
        varied, at = set(), []
        for m in rows:
            n = min(m, 64)
            differ = (F.linear(x[:m], weight)[:n] != ref[:n]).any(-1).nonzero().flatten().tolist()
            varied.update(differ)
            if differ:
                at.append(m)
    if not varied:
        return "none"
    return f"{len(varied)} of 64 rows, at M = {_span(at)}"


def attention_classes(dtype) -> tuple[str, str, str]:
    kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    gen = torch.Generator().manual_seed(0)
    kv, g, d, keys = 3, 3, 64, 100
    k = torch.randn(1, kv, 700, d, generator=gen).to(dtype)
    v = torch.randn(1, kv, 700, d, generator=gen).to(dtype)
    needle = torch.randn(1, kv, g, d, generator=gen).to(dtype)
    folded = {}
    for m in (1, 2, 3, 5, 10, 11, 12, 21, 40, 64):
        q = torch.randn(1, kv, g * m, d, generator=gen).to(dtype)
        q[:, :, :g] = needle
        folded[m] = kernel(q, k[:, :, :keys], v[:, :, :keys], 0.0, False, scale=0.125)[0][:, :, :g]
    padded = {}
    for hw in (100, 107, 112, 128, 144, 200, 256, 512, 600):
        bias = torch.zeros(1, 1, 1, hw, dtype=dtype)
        bias[..., keys:] = torch.finfo(dtype).min
        padded[hw] = kernel(
            needle, k[:, :, :hw], v[:, :, :hw], 0.0, False, attn_mask=bias, scale=0.125
        )[0]
    tail = {}
    x = torch.randn(64, generator=gen)
    for n in range(33, 65, 4):  # where element 32 of a tensor falls: vector body or scalar tail
        tail[n] = torch.sigmoid(x[:n])[32]
    return classes(folded), classes(padded), classes(tail)


def needle_rate(model, invariant: bool, tokenizer=None) -> tuple[int, float]:
    engine = Engine(model, tokenizer, batch_invariant=invariant)
    rng = random.Random(0)
    vocab = model.config.vocab_size

    def ids(n, seed):
        return torch.randint(
            3, min(vocab, 300), (n,), generator=torch.Generator().manual_seed(seed)
        ).tolist()

    needle = ids(37, 5)
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    alone = engine.generate([needle], params, return_logits=True)[0].logits
    same, gap = 0, 0.0
    for n in BATCHES:
        others = [ids(rng.randint(3, 80), 1000 * n + i) for i in range(n - 1)]
        at = rng.randrange(n)
        logits = engine.generate(others[:at] + [needle] + others[at:], params, return_logits=True)[
            at
        ].logits
        same += torch.equal(alone, logits)
        gap = max(gap, (alone.float() - logits.float()).abs().max().item())
    return same, gap


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-smollm2", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    lines = [
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); "
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}.",
        "",
        "**Operations.** Classes of row counts M (or key counts, or sizes) whose results for the "
        "same row are bitwise equal; one class means invariant.",
        "",
        "| operation | fp32 | bf16 |",
        "|---|---|---|",
    ]
    models = {}
    if not args.no_smollm2:
        from nudgeability.models.loader import load_model

        lm = load_model("smollm2")
        layer = lm.model.model.layers[0]
        weights = {
            "linear 576→576 (q_proj)": layer.self_attn.q_proj.weight,
            "linear 576→1536 (up_proj)": layer.mlp.up_proj.weight,
            "linear 1536→576 (down_proj)": layer.mlp.down_proj.weight,
            "LM head 576→49152": lm.model.lm_head.weight,
        }
        for name, w in weights.items():
            w = w.detach()
            lines.append(
                f"| {name}, one row among M | {linear_classes(w)} | "
                f"{linear_classes(w.bfloat16())} |"
            )
        for name, w in weights.items():
            w = w.detach()
            lines.append(
                f"| {name}, rows 0–63 of M ≥ 16 that differ from M = 64 | {linear_rows(w)} | "
                f"{linear_rows(w.bfloat16())} |"
            )
        models["SmolLM2-135M"] = (lm.model, lm.tokenizer)
    fp, bf = attention_classes(torch.float32), attention_classes(torch.bfloat16)
    lines += [
        f"| flash attention, folded query rows (arms) | {fp[0]} | {bf[0]} |",
        f"| flash attention, keys padded (masked) to | {fp[1]} | {bf[1]} |",
        f"| sigmoid of element 32, tensor size | {fp[2]} | — |",
        "",
        "**The engine** (needle test: one prompt alone against the same prompt at a random "
        f"position in batches of {', '.join(map(str, BATCHES))}; greedy, 12 new tokens): batches "
        "whose logits are bitwise the prompt's alone, and the largest difference.",
        "",
        "| model | dtype | engine (rows padded) | without the row padding |",
        "|---|---|---|---|",
    ]
    for arch in ARCHITECTURES:
        models[f"tiny {arch}"] = (tiny_model(arch, seed=7), None)
    for name, (model, tok) in models.items():
        for dtype in (torch.float32, torch.bfloat16):
            m = model.to(dtype)
            cells = []
            for invariant in (True, False):
                same, gap = needle_rate(m, invariant, tok)
                cells.append(f"{same}/{len(BATCHES)} (max diff {gap:.1e})")
            lines.append(f"| {name} | {str(dtype).split('.')[-1]} | {cells[0]} | {cells[1]} |")
        model.float()
    body = "\n".join(lines)
    publish("Batch invariance (benchmarks/batch_invariance.py)", body, write=not args.no_write)


if __name__ == "__main__":
    main()
