"""What this device does with this model, measured: the prefill rate and the decode step's time
at a few row counts, on the engine a run would build.

`measure` runs the run's own engine (splice/run/runner.py `unit_context`, which builds it with
splice/run/engine_build.py `run_engine`: the same dtype, static decode, pool and row cap) on the
run's first prompt: one fork of as many arms as the largest row
count, the prompt prefilled once (the prefill rate, from those steps), the arms' budgets
staggered so that they end in turn and the decode steps run a segment at each row count, largest
first (`staggered_budgets`); each step's wall time (engine/engine_stats.py `StepRecord.seconds`)
after the first few of a segment (which allocate, compile or capture). `Rates.step_seconds`
interpolates between the measured row counts and adds, for a step that reads more KV than the
measured one, those bytes at the device's copy bandwidth (costs/floor.py: the floor's
own KV term), slowed by the measured step's efficiency against its floor.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import torch

from nudgeability.costs.floor import (
    activation_dtype,
    copy_bandwidth,
    layer_kv_widths,
    weight_read_bytes,
)
from nudgeability.engine import SamplingParams

WARM_STEPS = 2  # decode steps left out of each measurement: allocation, compilation, capture
STEPS = 6  # decode steps measured at each row count
ROW_CHOICES = (1, 4, 16, 64, 256, 512)


@dataclass(frozen=True)
class Rates:
    """The measured speed of one model on one device (module docstring).

    A step's KV is counted in distinct slots: a prefix that a group of rows shares is read once
    for all of them (the engine's cascade), each row's own tokens once per row. The decode was
    measured with every row on one shared prompt of `shared_context` slots and `context` slots
    of its own."""

    device: str
    threads: int
    prefill_tokens_per_s: float
    decode: tuple[tuple[int, float], ...]  # (rows, seconds a step), rows ascending
    context: float  # slots of its own a measured decode row attends to (mean)
    kv_slot_bytes: int  # K and V of one token over the layers, in the cache dtype
    weight_bytes: int  # what a step reads of the weights (decode_floor.weight_read_bytes)
    copy_bytes_per_s: float  # read + write rate of a device copy (decode_floor.copy_bandwidth)
    shared_context: float = 0.0  # slots of the prompt every measured row shares
    measure_seconds: float = 0.0
    # sliding-window layers (a campaign model's, campaign.py): K and V a slot takes in them, read
    # for at most `window` slots a row
    window: int | None = None
    window_slot_bytes: int = 0

    def __post_init__(self):
        if not self.decode or self.prefill_tokens_per_s <= 0:
            raise ValueError("rates need a prefill rate and at least one decode point")

    def measured_slots(self, rows: float) -> float:
        """The distinct KV slots a measured step of `rows` rows read."""
        return self.shared_context + rows * self.context

    def step_seconds(self, rows: float, slots: float) -> float:
        """One decode step of `rows` rows reading `slots` distinct KV slots."""
        return self.measured_step(rows) + self.kv_seconds(rows, slots)

    def measured_step(self, rows: float) -> float:
        """The measured step time at `rows`: linear between measured row counts, the smallest's
        below them (a step has a fixed cost: the weights are read whatever the rows), and the
        last segment's slope above them (none above a single point)."""
        points = self.decode
        if rows <= points[0][0] or len(points) == 1:  # one point: its time at any rows
            return points[0][1]
        for (r0, t0), (r1, t1) in zip(points, points[1:]):
            if rows <= r1:
                return t0 + (t1 - t0) * (rows - r0) / (r1 - r0)
        (r0, t0), (r1, t1) = points[-2], points[-1]
        return t1 + max(0.0, (t1 - t0) / (r1 - r0)) * (rows - r1)

    def _kv_bytes(self, rows: float, slots: float) -> float:
        kv = slots * self.kv_slot_bytes
        if self.window is not None and rows > 0:
            kv += min(slots / rows, self.window) * rows * self.window_slot_bytes
        return kv

    def floor_seconds(self, rows: float, slots: float | None = None) -> float:
        """The bandwidth floor of a step (costs/floor.py): weights and the KV slots."""
        slots = self.measured_slots(rows) if slots is None else slots
        return (self.weight_bytes + self._kv_bytes(rows, slots)) / self.copy_bytes_per_s

    def efficiency(self, rows: float) -> float:
        """The measured step over its floor (1.0: at the floor)."""
        floor = self.floor_seconds(rows)
        return self.measured_step(rows) / floor if floor > 0 else 1.0

    def kv_seconds(self, rows: float, slots: float) -> float:
        """The KV a step reads beyond what the measured step read: its bytes at the copy
        bandwidth, slowed by the step's measured efficiency at these rows."""
        extra = self._kv_bytes(rows, slots) - self._kv_bytes(rows, self.measured_slots(rows))
        if extra <= 0:
            return 0.0
        return extra / self.copy_bytes_per_s * self.efficiency(rows)

    def prefill_seconds(self, tokens: float) -> float:
        return tokens / self.prefill_tokens_per_s

    def to_json(self) -> dict:
        out = asdict(self)
        out["decode"] = [list(p) for p in self.decode]
        return out

    @classmethod
    def from_json(cls, data: dict) -> Rates:
        data = dict(data)
        data["decode"] = tuple((int(r), float(t)) for r, t in data["decode"])
        return cls(**data)


def row_counts(peak_rows: float, max_rows: int | None) -> list[int]:
    """The row counts to measure for a run whose steps reach `peak_rows`: each choice up to the
    first at or above the peak (so the run's steps interpolate), at most the engine's cap."""
    cap = max_rows or ROW_CHOICES[-1]
    out = []
    for rows in ROW_CHOICES:
        if rows > cap:
            break
        out.append(rows)
        if rows >= peak_rows:
            break
    if cap not in out and cap < ROW_CHOICES[-1] and (not out or out[-1] < min(cap, peak_rows)):
        out.append(cap)
    return out


def staggered_budgets(rows: list[int], segment: int) -> list[int]:
    """New-token budgets of `max(rows)` arms forked together so that their decode steps run
    `segment` steps at each row count, largest first: arm k lives through one segment per row
    count above k (the first token of each comes with the prefill, before any decode step)."""
    return [1 + segment * sum(1 for c in rows if c > k) for k in range(max(rows))]


def measure(engine, prompts: list[tuple[list[int], int]], rows: list[int]) -> Rates:
    """Measure `engine` (module docstring) on `prompts`, each (ids, its shared start): one fork
    of `max(rows)` arms on the first prompt (its prefix prefilled once: the prefill rate), whose
    arms end in turn so that its decode steps run at each row count (`staggered_budgets`)."""
    from nudgeability.engine import ForkRequest

    t0 = time.perf_counter()
    device = engine.runner.device
    stats = engine.stats
    stats.trace = []
    first, first_shared = prompts[0]
    warm = SamplingParams(max_new_tokens=2, ignore_eos=True)  # allocation, the first kernels
    engine.generate([list(first[:64])], warm)
    counts = sorted(set(rows))
    segment = WARM_STEPS + STEPS
    budgets = staggered_budgets(counts, segment)
    params = [SamplingParams(max_new_tokens=b, ignore_eos=True) for b in budgets]
    before = len(stats.trace)
    engine.fork_many([ForkRequest(list(first), [[]] * len(budgets), params, shared=first_shared)])
    steps = stats.trace[before:]
    prefill = [s for s in steps if s.tokens > s.rows]
    prefill_rate = sum(s.tokens for s in prefill) / max(1e-9, sum(s.seconds for s in prefill))
    decode = []
    for count in counts:
        single = [s for s in steps if s.tokens == s.rows == count]
        if not single:
            raise RuntimeError(f"nudge plan: no decode step of {count} rows was measured")
        timed = single[WARM_STEPS:] or single
        decode.append((count, statistics.median(s.seconds for s in timed)))
    stats.trace = None
    model = engine.runner.model
    gib = 0.25 if device.type == "cpu" else 1.0
    size = activation_dtype(model).itemsize
    # what a step reads per slot: every layer's K and V (KV-shared layers read again), a
    # sliding-window layer's for at most its window (costs/floor.py)
    widths = layer_kv_widths(model)
    windows = [w for _, w, _ in widths if w is not None]
    return Rates(
        device=str(device),
        threads=torch.get_num_threads(),
        prefill_tokens_per_s=prefill_rate,
        decode=tuple(decode),
        # a row's own slots: the prompt's last token (borrowed by every arm), then what it
        # generated, on average over the measured segments
        context=1 + segment * len(counts) / 2,
        kv_slot_bytes=sum(width for width, w, _ in widths if w is None) * size,
        weight_bytes=weight_read_bytes(model),
        copy_bytes_per_s=copy_bandwidth(device, gib=gib),
        shared_context=len(first) - 1,
        measure_seconds=time.perf_counter() - t0,
        window=min(windows) if windows else None,
        window_slot_bytes=sum(width for width, w, _ in widths if w is not None) * size,
    )
