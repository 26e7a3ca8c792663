"""The fixed-shape decode's host step and attention work at the campaign's shapes, on CPU.

For decode steps of 16, 56 and 256 rows of 1-7k tokens over a pool of block 16 (what `nudge run`
uses), built from the engine's own objects (engine/sequence.py's runs, groups and rows,
engine/scheduling/step_plan.py's plans), this measures:

- the host time of `StaticDecode.load(plan, pad_id)` (engine/attention/static_decode.py) per step
  in steady state: every row advances one token a step, crossing block boundaries at staggered
  steps (the median over the steps);
- a cost model of the attention, read from the tables the step wrote (`kv_num_blocks`: the pool
  blocks each program of the FlexAttention call iterates, per head): the blocks visited in all,
  against the ideal (each row's own blocks once, each group's shared prefix once per group); the
  critical path (the most blocks one program iterates) against the longest row's prefix and own
  blocks; and the share of (query slot, key) products the mask or a padding slot throws away.

Two workloads: the base phase (every row its own one-row group: a 200-token prompt run and its
own generated blocks) and arms (groups of 8 or 16 rows sharing a long prefix, each with a short
suffix of its own). Only the constructor `StaticDecode(rows, pool, device, block_size)`, `load()`
and the tables `kv_num_blocks` / `kv_indices` are used, so the script runs unchanged on older
commits: `cd OTHER_CHECKOUT && python /path/to/benchmarks/decode_tables.py` gives their figures.
Prints a markdown table; `--write` also puts it in RESULTS.md (benchkit/results.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from nudgeability.engine.attention import static_decode
from nudgeability.engine.attention.decode_buckets import BUCKETS, bucket_for
from nudgeability.engine.kv.kv_pool import KVPool
from nudgeability.engine.sampling.sampling_params import SamplingParams
from nudgeability.engine.scheduling.step_plan import StepPlan
from nudgeability.engine.sequence import Group, Run

try:
    from nudgeability.engine.sequence import Row
except ImportError:  # a checkout from before the row class was named Row
    from nudgeability.engine.sequence import Sequence as Row

BLOCK = 16
PROMPT = 200  # the base phase's prompt run
PAD_ID = 0


class Workload:
    """Groups and rows laid out in a pool; `advance()` feeds every row one more token."""

    def __init__(self, rows: int, group_rows: int, prefix: int, own: tuple[int, int], steps: int):
        self.rows: list[Row] = []
        groups = -(-rows // group_rows)
        own_lengths = [own[0] + (own[1] - own[0]) * i // max(rows - 1, 1) for i in range(rows)]
        need = groups * -(-prefix // BLOCK) + sum(-(-(n + steps) // BLOCK) for n in own_lengths)
        self.pool = KVPool(need + 2, BLOCK, 1, "cpu")
        self.next_run, self.next_block = 1, self.pool.num_blocks - 1  # runs low, rows high
        params = SamplingParams(max_new_tokens=1 << 20)
        for g in range(groups):
            run = Run([1] * prefix, 0)
            run.start, run.written, run.owned = self.next_run * BLOCK, prefix, True
            self.next_run += -(-prefix // BLOCK)
            group = Group(g, [run], run, admitted=True)
            for r in range(g * group_rows, min(rows, (g + 1) * group_rows)):
                row = Row(r, group, [2], params)
                row.context = [3] * own_lengths[r]
                row.computed = own_lengths[r] - 1
                row.admitted_at = r
                group.rows.append(row)
                self.rows.append(row)
                self._cover(row)

    def _cover(self, row: Row) -> None:
        """Blocks for the row's context (the scheduler's `_grow`: highest first)."""
        while len(row.blocks) * BLOCK < len(row.context):
            row.blocks.append(self.next_block * BLOCK)
            self.next_block -= 1

    def plan(self) -> StepPlan:
        return StepPlan([], [(row, len(row.context) - 1, len(row.context)) for row in self.rows])

    def advance(self) -> None:
        for row in self.rows:
            row.context.append(3)
            row.computed += 1
            self._cover(row)


def q_tile(static) -> int:
    return static.block_mask(None).BLOCK_SIZE[0]


def cost(static, plan: StepPlan) -> dict:
    """The attention cost model of the step `static` holds (module docstring)."""
    counts = static.kv_num_blocks.reshape(-1).long()
    visited, critical = int(counts.sum()), int(counts.max())
    groups = {id(row.group): row.group for row, _, _ in plan.row_chunks}
    prefix_blocks = {
        g: sum(-(-s.length // BLOCK) for s in group.segments) for g, group in groups.items()
    }
    ideal = sum(prefix_blocks.values()) + sum(len(row.blocks) for row, _, _ in plan.row_chunks)
    ideal_critical = max(
        prefix_blocks[id(row.group)] + len(row.blocks) for row, _, _ in plan.row_chunks
    )
    useful = sum(row.group.prefix_len + s0 + 1 for row, s0, _ in plan.row_chunks)
    computed = visited * q_tile(static) * BLOCK
    return {
        "visited": visited,
        "ideal": ideal,
        "critical": critical,
        "ideal_critical": ideal_critical,
        "masked": 1 - useful / computed,
    }


def measure(rows: int, group_rows: int, prefix: int, own: tuple[int, int], steps: int) -> dict:
    work = Workload(rows, group_rows, prefix, own, steps + 2)
    static = static_decode.StaticDecode(
        bucket_for(rows, BUCKETS), work.pool, torch.device("cpu"), BLOCK
    )
    times = []
    for step in range(steps + 2):
        plan = work.plan()
        start = time.perf_counter()
        static.load(plan, PAD_ID)
        if step >= 2:  # the first loads fill the tables from nothing
            times.append(time.perf_counter() - start)
        if step < steps + 1:
            work.advance()
    out = cost(static, plan)
    out["host_ms"] = 1e3 * statistics.median(times)
    out["host_min_ms"] = 1e3 * min(times)  # beside other work, the least disturbed step
    tokens = [row.group.prefix_len + len(row.context) for row in work.rows]
    out["tokens"] = f"{min(tokens) / 1e3:.1f}-{max(tokens) / 1e3:.1f}k"
    return out


# (name, rows in a group, shared prefix tokens, own tokens (first row, last row))
WORKLOADS = [
    ("base 1-4k", 1, PROMPT, (800, 3800)),
    ("base 6k", 1, PROMPT, (5600, 6000)),
    ("arms 8 x 4k", 8, 4000, (50, 400)),
    ("arms 16 x 6k", 16, 6000, (50, 400)),
]


def table(row_counts, steps: int) -> str:
    lines = [
        "| workload | rows | tokens/row | load() ms/step (median, min) | visited blocks | ideal | ratio "
        "| critical path | ideal | ratio | masked or padding |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, group_rows, prefix, own in WORKLOADS:
        for rows in row_counts:
            m = measure(rows, group_rows, prefix, own, steps)
            lines.append(
                f"| {name} | {rows} | {m['tokens']} | {m['host_ms']:.2f}, {m['host_min_ms']:.2f} "
                f"| {m['visited']:,} "
                f"| {m['ideal']:,} | {m['visited'] / m['ideal']:.2f} | {m['critical']:,} "
                f"| {m['ideal_critical']:,} | {m['critical'] / m['ideal_critical']:.2f} "
                f"| {100 * m['masked']:.1f}% |"
            )
            print(lines[-1], flush=True)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[16, 56, 256])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per shape")
    parser.add_argument("--write", action="store_true", help="put the table in RESULTS.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"Q tile {static_decode.Q_TILE}, block {BLOCK}, {static_decode.__file__}\n", flush=True)
    body = table(args.rows, args.steps)
    if args.write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from benchkit.results import write_section

        write_section("decode_tables", body)


if __name__ == "__main__":
    main()
