"""The products' cheaper calls (models/invariant.py, *Blocks*): a block of 64 (or `--block`) rows
against its 16-row tiles, and on one core a weight reordered whole against its two column halves,
timed, and whether each gives the tiles' and halves' bits under every oneDNN ISA.

    python benchmarks/cheaper_calls.py [--rounds 5] [--block 256]

Timed, on one torch thread, on SmolLM2's weights reordered into oneDNN's layout as the engine
holds them, cold (one of 32 copies in turn, as a forward walks through its layers), the two ways
alternated round by round, median per block's rows (blocks) or per tile (whole): what
`row_blocks` and `product_slices` save per call. Not timed, in a fresh process per
`ONEDNN_MAX_CPU_ISA` (read once when oneDNN starts: how this machine stands in for older CPUs):
the engine's own guards, `blocks_agree` on each slice shape and `whole_agrees` on each halved
weight, and the same comparisons on every row of a block of random rows. Writes its section of
benchmarks/RESULTS.md. Run it alone on the machine.
"""

from __future__ import annotations

import json
import statistics
import time

import torch

from nudgeability.bench.isa_probe import under_each_isa
from nudgeability.bench.results import publish, rounds_parser
from nudgeability.models.invariant import BLOCK_SIZES, TILE_ROWS, column_slices

# SmolLM2-135M's reordered linears ([out, in]); the LM head runs dense and is left out
WEIGHTS = {"q, o": (576, 576), "k, v": (192, 576), "gate, up": (1536, 576), "down": (576, 1536)}
COPIES = 32

PROBE = r"""
import json, sys, torch
from nudgeability.models import invariant
torch.set_num_threads(1); torch.manual_seed(0)
f = lambda x, w: torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")
out = {}
asked = json.loads(sys.argv[1])
B = asked["block"]
for n, k in asked["shapes"]:
    w = torch.randn(n, k)
    slices = invariant.column_slices(n)
    halves = invariant.reorder_slices(w, slices)
    whole = invariant.reorder_slices(w, [(0, n)])[0]
    x = torch.randn(B, k)
    def tiles(part):
        return torch.cat([f(x[t:t + 16], part) for t in range(0, B, 16)])
    canonical = torch.cat([tiles(p) for p in halves], dim=1)
    blocks = torch.cat([f(x, p) for p in halves], dim=1)
    out[f"{n}x{k}"] = {
        "guard_blocks": all(invariant.blocks_agree(p, B) for p in halves + [whole]),
        "guard_whole": invariant.whole_agrees(n, k) if len(slices) == 2 else None,
        "rows_blocks": int((blocks != canonical).any(dim=1).sum()),
        "rows_whole": int((tiles(whole) != canonical).any(dim=1).sum()),
        "rows_whole_blocks": int((f(x, whole) != canonical).any(dim=1).sum()),
    }
print(json.dumps(out))
"""


def _timed(run, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls


def _median_pair(first, second, rounds: int, calls: int) -> tuple[float, float]:
    got: tuple[list, list] = ([], [])
    for _ in range(rounds):
        for i, run in enumerate((first, second)):
            run()
            got[i].append(_timed(run, calls))
    return statistics.median(got[0]) * 1e6, statistics.median(got[1]) * 1e6


def timings(rounds: int, block: int) -> list[str]:
    torch.set_num_threads(1)
    lines = [
        f"| weight (out × in) | {block} rows: {block // TILE_ROWS} tiles µs | one block µs "
        "| tiles / block "
        "| one tile: two halves µs | whole µs | halves / whole |",
        "|---|---|---|---|---|---|---|",
    ]
    return lines + [_weight_row(name, n, k, rounds, block) for name, (n, k) in WEIGHTS.items()]


def _weight_row(name: str, n: int, k: int, rounds: int, size: int) -> str:
    f = torch.ops.mkldnn._linear_pointwise.default
    slices = column_slices(n)
    weights = [torch.randn(n, k) for _ in range(COPIES)]
    halves = [
        [torch.ops.mkldnn._reorder_linear_weight(w[a:b].contiguous(), TILE_ROWS) for a, b in slices]
        for w in weights
    ]
    wholes = [torch.ops.mkldnn._reorder_linear_weight(w, TILE_ROWS) for w in weights]
    x = torch.randn(size, k)
    turn = [0]

    def pick(bank: list):
        turn[0] = (turn[0] + 1) % COPIES
        return bank[turn[0]]

    def tiles() -> None:
        for part in pick(halves):
            for t in range(0, size, TILE_ROWS):
                f(x[t : t + TILE_ROWS], part, None, "none", [], "")

    def block() -> None:
        for part in pick(halves):
            f(x, part, None, "none", [], "")

    def two_halves() -> None:
        for part in pick(halves):
            f(x[:TILE_ROWS], part, None, "none", [], "")

    def whole() -> None:
        f(x[:TILE_ROWS], pick(wholes), None, "none", [], "")

    t_tiles, t_block = _median_pair(tiles, block, rounds, 100)
    row = f"| {name} ({n} × {k}) | {t_tiles:.0f} | {t_block:.0f} | {t_tiles / t_block:.2f}× "
    if len(slices) != 2:
        return row + "| (one slice) | | |"
    t_halves, t_whole = _median_pair(two_halves, whole, rounds, 200)
    return row + f"| {t_halves:.0f} | {t_whole:.0f} | {t_halves / t_whole:.2f}× |"


def bits(block: int) -> list[str]:
    asked = json.dumps({"shapes": list(WEIGHTS.values()), "block": block})
    lines = [
        "| ONEDNN_MAX_CPU_ISA | `blocks_agree` on every slice | `whole_agrees` on the halved "
        "| rows differing: blocks | whole | whole in blocks |",
        "|---|---|---|---|---|---|",
    ]
    for isa, result in under_each_isa(PROBE, asked).items():
        if isinstance(result, str):
            lines.append(f"| {isa} | failed: {result} | | | | |")
            continue
        got = result.values()
        halved = [v["guard_whole"] for v in got if v["guard_whole"] is not None]
        lines.append(
            f"| {isa} | {'yes' if all(v['guard_blocks'] for v in got) else 'NO'} "
            f"| {'yes' if all(halved) else 'NO'} | {sum(v['rows_blocks'] for v in got)} "
            f"| {sum(v['rows_whole'] for v in got)} | {sum(v['rows_whole_blocks'] for v in got)} |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = rounds_parser(__doc__.splitlines()[0])
    parser.add_argument("--block", type=int, choices=BLOCK_SIZES, default=64)
    args = parser.parse_args(argv)
    block = args.block
    body = "\n".join(
        [
            f"`python benchmarks/cheaper_calls.py --rounds {args.rounds} --block {block}`: one "
            "torch thread, "
            f"SmolLM2's weight shapes reordered into oneDNN's layout, cold (one of {COPIES} "
            "copies in turn), the two ways alternated, median per call group. Torch "
            + torch.__version__
            + ".",
            "",
            *timings(args.rounds, block),
            "",
            f"Bits, in a fresh process per ISA (not timed): the engine's guards, and the rows of "
            f"{block} random ones (over the four weights) whose outputs differ from the canonical "
            f"calls (16-row tiles of each column half) when run as one {block}-row call per half, "
            f"as 16-row tiles of the whole weight, and as one {block}-row call of the whole weight.",
            "",
            *bits(block),
        ]
    )
    name = "Kernels: the products' cheaper calls" + (
        "" if block == 64 else f" ({block}-row blocks)"
    )
    publish(name, body, write=not args.no_write)


if __name__ == "__main__":
    main()
