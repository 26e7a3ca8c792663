"""The invariant products' kernel: MKL's GEMM (`torch.bmm` over 16-row tiles) against oneDNN's matmul
(`torch.ops.mkldnn._linear_pointwise`, one call per tile) on a dense weight and on one reordered
once into oneDNN's layout (`_reorder_linear_weight`), and whether oneDNN keeps a row's bits.

    python benchmarks/onednn_products.py [--rounds 5]

Timed, on one torch thread (each core of `models/cores.Cores` runs one): every weight slice
SmolLM2's forward calls (models/invariant.column_slices), for 1 and 13 tiles, with the weight
cold (one of 32 copies in turn, as a forward walks through 30 layers): the three kernels
alternated round by round, median per call; beside them `F.linear` on the tiles' real rows in
one call (one row for one tile: a decode step of one arm; all 208 rows for 13 tiles), what the
fixed tiles cost over the library's own call. Run it alone on the machine.

Not timed, in a fresh process per oneDNN ISA (`ONEDNN_MAX_CPU_ISA`, read once when oneDNN
starts: how this machine stands in for older CPUs): a row at each of the 16 places of a tile
(the other rows random) against the same row alone among zero rows; a call of 8 or 32 rows
against 16; packed against dense. Writes its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import json
import statistics
import time

import torch

from nudgeability.bench.isa_probe import under_each_isa
from nudgeability.bench.results import publish, rounds_parser
from nudgeability.models.invariant import TILE_ROWS, column_slices

# SmolLM2-135M: q/o, k/v, gate/up, down, the LM head ([out, in])
WEIGHTS = {"q, o": (576, 576), "k, v": (192, 576), "gate, up": (1536, 576), "down": (576, 1536)}
WEIGHTS["LM head"] = (49152, 576)
COPIES = 32

PROBE = r"""
import json, torch
torch.set_num_threads(1); torch.manual_seed(0)
f = lambda x, w: torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")
out = {}
for n, k in json.loads(__import__("sys").argv[1]):
    w = torch.randn(n, k); p = torch.ops.mkldnn._reorder_linear_weight(w, 16)
    x = torch.randn(16, k); full = f(x, p)
    alone = sum(not torch.equal(f(torch.zeros(16, k).index_copy(0, torch.tensor([j]), x[j:j+1]), p)[j],
                                full[j]) for j in range(16))
    rows = sum(not torch.equal(f(torch.cat([x, x])[:m], p)[:16], full[:16]) for m in (32,)) + \
        (not torch.equal(f(x[:8].contiguous(), p), full[:8]))
    out[f"{n}x{k}"] = {"places": alone, "other_m": int(rows), "dense": int(not torch.equal(f(x, w), full))}
print(json.dumps(out))
"""


def _slices() -> list[tuple[str, int, int]]:
    """(name, slice columns, K) for every distinct slice shape the forward calls."""
    seen = {}
    for name, (n, k) in WEIGHTS.items():
        for s0, s1 in column_slices(n):
            seen.setdefault((s1 - s0, k), name)
    return [(name, cols, k) for (cols, k), name in seen.items()]


def _timed(run, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls


def _kernels(x: torch.Tensor, weights: list, packed: list) -> dict:
    """The three ways to run x [tiles, 16, K] against the next of the weights in turn."""
    tiles, _, k = x.shape
    turn = [0]

    def pick(bank: list) -> torch.Tensor:
        turn[0] = (turn[0] + 1) % COPIES
        return bank[turn[0]]

    def onednn(bank: list):
        def run() -> None:
            w = pick(bank)
            for t in range(tiles):
                torch.ops.mkldnn._linear_pointwise(x[t], w, None, "none", [], "")

        return run

    def bmm() -> None:
        w = pick(weights)
        torch.bmm(x, w.t().expand(tiles, k, w.shape[0]))

    # What the fixed tiles cost over one library call on the real rows: one tile stands for one
    # row (a decode step of one arm, P4 at N = 1), 13 tiles for 208 rows (a prefill chunk)
    rows = x[0, :1] if tiles == 1 else x.reshape(tiles * TILE_ROWS, k)

    def library() -> None:
        torch.nn.functional.linear(rows, pick(weights))

    return {"bmm": bmm, "dense": onednn(weights), "packed": onednn(packed), "library": library}


def timings(rounds: int) -> list[str]:
    torch.set_num_threads(1)
    lines = [
        "| weight (slice × K) | tiles | MKL bmm µs | oneDNN dense µs | oneDNN packed µs "
        "| bmm / packed | `F.linear` on the real rows in one call µs | packed / `F.linear` |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, cols, k in _slices():
        weights = [torch.randn(cols, k) for _ in range(COPIES)]
        packed = [torch.ops.mkldnn._reorder_linear_weight(w, TILE_ROWS) for w in weights]
        for tiles in (1, 13):
            kernels = _kernels(torch.randn(tiles, TILE_ROWS, k), weights, packed)
            got = {key: [] for key in kernels}
            calls = max(8, 400 // tiles)
            for _ in range(rounds):
                for key, run in kernels.items():
                    run()
                    got[key].append(_timed(run, calls))
            med = {key: statistics.median(v) * 1e6 for key, v in got.items()}
            lines.append(
                f"| {name} ({cols} × {k}) | {tiles} | {med['bmm']:.0f} | {med['dense']:.0f} "
                f"| {med['packed']:.0f} | {med['bmm'] / med['packed']:.2f}× "
                f"| {med['library']:.0f} | {med['packed'] / med['library']:.2f}× |"
            )
    return lines


def invariance() -> list[str]:
    shapes = json.dumps(sorted({(cols, k) for _, cols, k in _slices()}))
    lines = [
        "| ONEDNN_MAX_CPU_ISA | slices checked | rows differing by place in the tile | "
        "calls of 8 or 32 rows differing | packed ≠ dense |",
        "|---|---|---|---|---|",
    ]
    for isa, result in under_each_isa(PROBE, shapes).items():
        if isinstance(result, str):
            lines.append(f"| {isa} | failed: {result} | | | |")
            continue
        got = result
        lines.append(
            f"| {isa} | {len(got)} | {sum(v['places'] for v in got.values())} "
            f"| {sum(v['other_m'] for v in got.values())} | {sum(v['dense'] for v in got.values())} |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    args = rounds_parser(__doc__.splitlines()[0]).parse_args(argv)
    body = "\n".join(
        [
            f"`python benchmarks/onednn_products.py --rounds {args.rounds}`: one torch thread, "
            f"weights cold (one of {COPIES} copies in turn), the kernels alternated, median per "
            "call of all the tiles. Torch " + torch.__version__ + ".",
            "",
            *timings(args.rounds),
            "",
            "Bits, in a fresh process per ISA (not timed): a row at each of 16 places against "
            "itself alone among zero rows; calls of 8 and 32 rows against 16; packed against "
            "dense (counts of differing rows or calls, over every slice shape above).",
            "",
            *invariance(),
        ]
    )
    publish("Kernels: oneDNN's matmul for the invariant products", body, write=not args.no_write)


if __name__ == "__main__":
    main()
