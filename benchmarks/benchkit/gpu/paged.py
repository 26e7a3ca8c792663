"""GPU section: the paged kernel for row tokens (engine/invariant/cuda/paged_attention.py), its
bits alone and among others, and its time against the fixed-shape decode's FlexAttention call.

    python benchmarks/gpu_check.py --only paged

1. *Bitwise* (bf16, 32 query heads over 8 KV heads of 128, blocks of 16, a 1,000-token prefix):
   a decode token alone against the same token among M others of its group (M over issue 61's
   sweep, 1 to 511, at the first and last place), under permuted physical blocks, and inside a
   prefill chunk of several widths; each `same` or the count of elements that differ, and the
   largest difference from an fp32 softmax.
2. *Time* of one layer's decode attention at 16, 64 and 256 rows on two workloads of
   benchmarks/decode_tables.py (the base phase; arms sharing a long prefix), on the same
   `StaticDecode` tables (engine/attention/static_decode.py): the compiled FlexAttention call
   (`flex_decode_attention`, not batch-invariant) against the paged kernel on the bucket's
   buffers (`static_decode_attention`), median of CUDA-event timings, and their ratio.

With `dry_run`, a few small cases on CPU in Triton's interpreter (fp16: the interpreter's bf16 is
wrong), timed by the wall clock (no figure is a GPU's).
"""

from __future__ import annotations

import statistics
import time
from functools import partial

import torch

from nudgeability.engine.attention import static_decode
from nudgeability.engine.attention.decode_buckets import BUCKETS, bucket_for
from nudgeability.engine.invariant.cuda import paged_attention as paged
from nudgeability.engine.invariant.cuda.paged_tables import TableBuilder
from nudgeability.engine.kv.kv_cache import LayerKV

from .check import Row, triton_refusal

SWEEP = (1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 257, 511)
BS = 16


class Pool:
    """Random K/V `[kv, slots, D]`, a prefix run at slot BS, and rows of `own` slots each in
    shuffled blocks after it; queries per (row, slot)."""

    def __init__(self, device, dtype, kv, g, d, prefix, own, rows, seed=0):
        gen = torch.Generator().manual_seed(seed)
        self.kv, self.g, self.d, self.prefix, self.own = kv, g, d, prefix, own
        per = -(-own // BS)
        first = 1 + -(-prefix // BS)
        blocks = first + rows * per + per  # a spare row's worth for the permutation check
        shape = (kv, blocks * BS, d)
        self.k = torch.randn(shape, generator=gen).to(device, dtype)
        self.v = torch.randn(shape, generator=gen).to(device, dtype)
        self.q = torch.randn(rows, own, kv * g, d, generator=gen).to(device, dtype)
        ids = first + torch.randperm(rows * per, generator=gen)
        self.blocks = [[int(b) * BS for b in ids[r * per : (r + 1) * per]] for r in range(rows)]
        self.spare = [(first + rows * per + i) * BS for i in range(per)]
        self.device = device

    def step(self, tokens):
        """{(row, slot): output [H, D]} of one step of row tokens (a row's adjacent slots one
        prefill chunk)."""
        builder = TableBuilder(paged.tile_tokens(self.g), BS)
        builder.group(0, len(tokens), ((BS, self.prefix, 0),))
        i = 0
        while i < len(tokens):
            row, s0 = tokens[i]
            j = i + 1
            while j < len(tokens) and tokens[j] == (row, tokens[j - 1][1] + 1):
                j += 1
            builder.row(i, s0, tokens[j - 1][1] + 1, self.prefix, blocks=self.blocks[row])
            i = j
        q = torch.stack([self.q[r, s] for r, s in tokens])
        pos = torch.tensor([self.prefix + s for _, s in tokens], device=self.device)
        tables = builder.tensors(self.device)
        out = paged.row_attention(q, self.k, self.v, pos, tables, self.d**-0.5)
        return {t: out[n] for n, t in enumerate(tokens)}

    def reference(self, row, slot):
        slots = list(range(BS, BS + self.prefix))
        slots += [self.blocks[row][s // BS] + s % BS for s in range(slot + 1)]
        index = torch.tensor(slots, device=self.device)
        k, v = self.k[:, index].float(), self.v[:, index].float()
        q = self.q[row, slot].view(self.kv, self.g, self.d).float()
        w = torch.softmax(q @ k.transpose(1, 2) * self.d**-0.5, dim=-1)
        return (w @ v).reshape(-1, self.d)


def differ(a, b) -> str:
    n = int((a != b).sum())
    return "same" if n == 0 else f"{n} differ"


def bitwise(device, dtype, sweep, shapes) -> list[Row]:
    pool = Pool(device, dtype, *shapes, rows=max(sweep) + 2)
    target = (0, pool.own - 3)
    alone = pool.step([target])[target]
    error = (alone.float() - pool.reference(*target)).abs().max().item()
    lines = [("alone, max error vs fp32 softmax", f"{error:.2e}")]
    for m in sweep:
        others = [(r, 1 + r % (pool.own - 1)) for r in range(1, m + 1)]
        for name, step in (("first", [target] + others), ("last", others + [target])):
            got = pool.step(step)[target]
            lines.append((f"among {m} others, {name}", differ(got, alone)))
    for width in (w for w in (2, 17, 64) if w <= target[1] + 1):
        chunk = [(0, s) for s in range(target[1] - width + 2, target[1] + 2)]
        got = pool.step([(1, 5)] + chunk)[target]
        lines.append((f"in a prefill chunk of {width}", differ(got, alone)))
    for old, new in zip(pool.blocks[0], pool.spare[::-1]):
        pool.k[:, new : new + BS] = pool.k[:, old : old + BS]
        pool.v[:, new : new + BS] = pool.v[:, old : old + BS]
    pool.blocks[0] = pool.spare[::-1]
    lines.append(("permuted physical blocks", differ(pool.step([target])[target], alone)))
    return lines


def timed(fn, iterations: int) -> float:
    """Median milliseconds of `fn()` (CUDA events; wall time on CPU)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(iterations):
        if torch.cuda.is_available():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def timing(device, dtype, rows_list, workloads, kv, g, d, iterations) -> list[Row]:
    from decode_tables import Workload

    lines = []
    for name, group_rows, prefix, own in workloads:
        for rows in rows_list:
            work = Workload(rows, group_rows, prefix, own, 1)
            slots = work.pool.num_blocks * BS
            k = torch.randn(kv, slots, d, device=device, dtype=dtype)
            v = torch.randn(kv, slots, d, device=device, dtype=dtype)
            bucket = bucket_for(rows, BUCKETS)
            q = torch.randn(1, kv * g, bucket, d, device=device, dtype=dtype)
            results = {}
            for kind, tiles in (("flex", None), ("paged", paged.tile_tokens(g))):
                static = static_decode.StaticDecode(bucket, work.pool, device, BS, tiles)
                static.load(work.plan(), 0)
                handle = LayerKV(static, k, v, None)
                attend = (
                    static_decode.flex_decode_attention
                    if kind == "flex"
                    else paged.static_decode_attention
                )
                results[kind] = timed(partial(attend, q, handle, d**-0.5, None), iterations)
            ratio = results["paged"] / results["flex"]
            lines.append(
                (
                    f"decode attention, {name}, {rows} rows: flex / paged ms",
                    f"{results['flex']:.3f} / {results['paged']:.3f} (paged/flex {ratio:.2f})",
                )
            )
    return lines


WORKLOADS = [
    ("base 1-4k", 1, 200, (800, 3800)),
    ("arms 8 x 4k", 8, 4000, (50, 400)),
]


def section(deadline: float, dry_run: bool = False, progress=None) -> list[Row]:
    """The rows of this section (module docstring)."""
    refused = triton_refusal("paged attention", dry_run, True)
    if refused:
        return refused
    if dry_run:
        device, dtype = torch.device("cpu"), torch.float16
        sweep, shapes = (1, 5), (2, 2, 16, 40, 40)
        rows, workloads, iterations, dims = [3], [("arms 2 x 60", 2, 60, (5, 20))], 1, (2, 2, 16)
    else:
        device, dtype = torch.device("cuda"), torch.bfloat16
        sweep, shapes = SWEEP, (8, 4, 128, 1000, 600)
        rows, workloads, iterations, dims = [16, 64, 256], WORKLOADS, 50, (8, 4, 128)
    got = bitwise(device, dtype, sweep, shapes)
    if progress:
        progress(got)
    if time.monotonic() > deadline:
        return got + [("decode attention timing", "skipped: out of the section's time")]
    return got + timing(device, dtype, rows, workloads, *dims, iterations)
