"""The attention's cheaper calls (engine/attention/fixed_shape.py): a prefill chunk's own keys
packed into items of many tokens against one token per item, and a shared-keys call of many rows
in wide query tiles against 16-row tiles, timed, and whether each gives the narrow call's bits
under every MKL branch.

    python benchmarks/cheaper_attention.py [--rounds 5]

Timed on one torch thread, the two ways alternated round by round, median per call, on the
shapes of the P1 workload's suffix prefill (SmolLM2: 3 kv heads, g = 3, D = 64; 12 arms of up to
30 suffix tokens, 243 in all): the own keys of 12 rows x 30 tokens against 128 keys, one row of
243 tokens against 256 keys, and 729 folded rows against a 1,024-key prefix. Each is the
engine's own call (`own_keys_attention`, `shared_keys_attention`) with the shape forced, on
inputs built once. Not timed, in a fresh process per `MKL_CBWR` branch (read once, when MKL
starts: how this machine stands in for other CPUs; ATen's CPU flash kernel runs its fp32 GEMMs
through MKL): the engine's own guards, `packing_agrees` and `wide_tiles_agree`, on the shapes
above and others, fp32 and bf16. Writes its section of benchmarks/RESULTS.md. Run it alone.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import torch

from nudgeability.bench.results import publish, rounds_parser
from nudgeability.engine.attention.fixed_shape import (
    QUERY_TILE,
    WIDE_TILE,
    lowest,
    own_keys_attention,
    own_tokens_per_item,
    pack_bias,
    shared_keys_attention,
)

BRANCHES = ("", "AVX512", "AVX2", "AVX", "SSE4_2", "COMPATIBLE")
KV, G, D = 3, 3, 64
OWN = ((12, 30, 128), (1, 243, 256))  # (rows, tokens per row, own keys)
SHARED = (729, 1024)  # folded rows, prefix keys
CALLS = 20

PROBE = r"""
import json, torch
from nudgeability.engine.attention import fixed_shape as fs
torch.set_num_threads(1)
out = {}
for dtype in (torch.float32, torch.bfloat16):
    name = str(dtype).split(".")[-1]
    for g, width, hw in ((3, 30, 128), (3, 243, 256), (3, 50, 640), (4, 64, 128), (8, 33, 384)):
        t = fs.own_tokens_per_item(width, g)
        out[f"own {name} g={g} {t} tokens x {hw} keys"] = fs.packing_agrees(t, g, hw, 64, dtype)
    for keys in (64, 256, 512, 1024, 2048):
        for masked in (False, True):
            out[f"wide {name} {keys} keys{' masked' if masked else ''}"] = fs.wide_tiles_agree(
                keys, 64, dtype, masked)
print(json.dumps(out))
"""


def _timed(run) -> float:
    start = time.perf_counter()
    for _ in range(CALLS):
        run()
    return (time.perf_counter() - start) / CALLS


def _median_pair(first, second, rounds: int) -> tuple[float, float]:
    got: tuple[list, list] = ([], [])
    for _ in range(rounds):
        for i, run in enumerate((first, second)):
            run()
            got[i].append(_timed(run))
    return statistics.median(got[0]) * 1e3, statistics.median(got[1]) * 1e3


def _own_inputs(rows: int, width: int, hw: int):
    gen = torch.Generator().manual_seed(0)
    n = KV * rows
    q = torch.randn(n, width, G, D, generator=gen)
    k, v = torch.randn(n, 1, hw, D, generator=gen), torch.randn(n, 1, hw, D, generator=gen)
    slot = torch.randint(0, hw - width + 1, (n, 1), generator=gen) + torch.arange(width)
    visible = torch.arange(hw)[None, None, :] <= slot[:, :, None]
    return q, k, v, torch.where(visible, 0.0, lowest(torch.float32))[:, :, None]


def timings(rounds: int) -> list[str]:
    torch.set_num_threads(1)
    lines = [
        "| call | narrow, ms | cheaper, ms | narrow / cheaper |",
        "|---|---|---|---|",
    ]
    for rows, width, hw in OWN:
        q, k, v, bias = _own_inputs(rows, width, hw)
        tokens = own_tokens_per_item(width, G)
        packed = pack_bias(bias, tokens, G)
        one, many = _median_pair(
            lambda q=q, k=k, v=v, bias=bias: own_keys_attention(q, k, v, bias, D**-0.5),
            lambda q=q, k=k, v=v, b=packed, t=tokens: own_keys_attention(q, k, v, b, D**-0.5, t),
            rounds,
        )
        lines.append(
            f"| own keys: {rows} row(s) x {width} tokens, {hw} keys; 1 token per item against "
            f"{tokens} | {one:.2f} | {many:.2f} | {one / many:.2f} |"
        )
    rows, keys = SHARED
    gen = torch.Generator().manual_seed(1)
    folded = torch.randn(KV, rows, D, generator=gen)
    k, v = torch.randn(KV, keys, D, generator=gen), torch.randn(KV, keys, D, generator=gen)
    narrow, wide = _median_pair(
        lambda: shared_keys_attention(folded, k, v, None, D**-0.5, QUERY_TILE),
        lambda: shared_keys_attention(folded, k, v, None, D**-0.5, WIDE_TILE),
        rounds,
    )
    lines.append(
        f"| shared keys: {rows} folded rows against {keys} keys; {QUERY_TILE}-row tiles against "
        f"{WIDE_TILE} | {narrow:.2f} | {wide:.2f} | {narrow / wide:.2f} |"
    )
    return lines


def bits() -> list[str]:
    got = {}
    for branch in BRANCHES:
        env = {key: v for key, v in os.environ.items() if key != "MKL_CBWR"}
        if branch:
            env["MKL_CBWR"] = branch
        done = subprocess.run(
            [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True
        )
        name = branch or "(unset: this CPU's own)"
        got[name] = json.loads(done.stdout) if done.returncode == 0 else done.stderr.strip()[-200:]
    names = list(got)
    checks = next((list(r) for r in got.values() if isinstance(r, dict)), [])
    lines = ["| guard | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for check in checks:
        cells = [
            ("same bits" if r[check] else "**differ**") if isinstance(r, dict) else "failed"
            for r in got.values()
        ]
        lines.append(f"| {check} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    args = rounds_parser(__doc__.splitlines()[0]).parse_args(argv)
    body = "\n".join(
        [
            f"`python benchmarks/cheaper_attention.py --rounds {args.rounds}`: one torch thread, "
            f"the two ways alternated, median per call ({CALLS} calls a round). Torch "
            f"{torch.__version__}.",
            "",
            *timings(args.rounds),
            "",
            "The engine's guards in a fresh process per MKL_CBWR branch (not timed): whether the "
            "cheaper call gives every row the narrow call's bits. Where a guard says they differ, "
            "the engine keeps the narrow call on that machine.",
            "",
            *bits(),
        ]
    )
    publish("Kernels: the attention's cheaper calls", body, write=not args.no_write)


if __name__ == "__main__":
    main()
