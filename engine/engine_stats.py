"""What the engine counts: token-forwards by kind, how full its steps were, and (on request) a
record per step. `Engine.stats` holds one `EngineStats`; benchmarks and tests read it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from nudgeability.engine.sequence import sources

if TYPE_CHECKING:  # the step's types, for the hints only (no import cycle)
    from nudgeability.engine.scheduling.step_plan import StepPlan
    from nudgeability.engine.step_run import StepRun


@dataclass
class StepRecord:
    """What one step did (kept in `EngineStats.trace` when the engine is made with `trace=True`)."""

    tokens: int  # tokens of the forward, pads excluded
    rows: int  # rows that chose a token
    running: int  # rows holding KV slots
    waiting: int  # rows not admitted yet, in admitted or waiting groups
    kv_blocks: int  # pool blocks in use after the step
    live_tokens: int  # token slots whose KV is written and still needed, after the step
    seconds: float = (
        0.0  # wall time of the step (what `nudge plan` measures: costs/estimate/rates.py)
    )


@dataclass
class EngineStats:
    """Token-forwards actually computed since the engine was made, and how full the steps were."""

    prefix_tokens: int = 0  # prefix-chunk tokens (groups' own runs)
    suffix_tokens: int = 0  # row-prefill tokens (suffixes, stems, recomputation)
    decode_tokens: int = 0  # single-token rows
    pad_tokens: int = 0  # pad rows (ModelRunner.padded: batch invariance)
    forward_calls: int = 0
    steps: int = 0
    # the fixed-shape decode (attention/static_dispatch.py): steps whose single-token rows ran
    # with fixed shapes, those of them that also ran an eager prefill beside (split), and those
    # whose tokens were the greedy ids computed with the forward (sampling/choose.py)
    static_steps: int = 0
    split_steps: int = 0
    fused_greedy_steps: int = 0
    sampled_rows: int = 0  # rows that chose a token, summed over steps
    preemptions: int = 0
    peak_cache_bytes: int = 0  # largest KV held at once (pool blocks in use x block bytes)
    prefill_seconds: float = 0.0  # steps with prefill work
    decode_seconds: float = 0.0  # steps of single-token rows only (each ends in a host sync)
    trace: list[StepRecord] | None = None

    @property
    def token_forwards(self) -> int:
        return self.prefix_tokens + self.suffix_tokens + self.decode_tokens


def account(engine, plan: StepPlan, run: StepRun, seconds: float) -> None:
    """Add one step of `engine` (its plan, what its forwards computed, its wall time) to
    `engine.stats`."""
    stats = engine.stats
    stats.prefix_tokens += sum(c1 - c0 for _, c0, c1 in plan.prefix_chunks)
    single = plan.decode_rows
    stats.decode_tokens += single
    stats.suffix_tokens += sum(s1 - s0 for _, s0, s1 in plan.row_chunks) - single
    stats.pad_tokens += run.pad_tokens
    stats.forward_calls += len(run.layouts)
    stats.steps += 1
    stats.sampled_rows += len(run.last)
    stats.static_steps += run.static
    stats.split_steps += run.split and run.static
    stats.fused_greedy_steps += run.fused
    stats.preemptions = engine.scheduler.preemptions
    slot_bytes = engine.pool.slot_bytes()
    stats.peak_cache_bytes = max(
        stats.peak_cache_bytes, engine.pool.in_use * engine.block_size * slot_bytes
    )
    if plan.prefix_chunks or single < len(plan.row_chunks):
        stats.prefill_seconds += seconds
    else:
        stats.decode_seconds += seconds
    if stats.trace is not None:
        stats.trace.append(_record(engine, run, seconds))


def _record(engine, run: StepRun, seconds: float) -> StepRecord:
    sched = engine.scheduler
    groups = sched.admitted + sched.waiting
    # the runs behind the segments: a trunk once, however many views of it are read
    runs = {id(r): r for g in sched.admitted for r in sources(g.segments) if r.start is not None}
    live = sum(r.written for r in runs.values())
    live += sum(
        r.computed for r in (*sched.running, *sched.retained) if r.holds_slots and r.stem is None
    )
    return StepRecord(
        tokens=run.real_tokens,
        rows=len(run.last),
        running=sum(1 for r in sched.running if r.stem is None),
        waiting=sum(sum(1 for r in g.waiting if r.stem is None) for g in groups),
        kv_blocks=engine.pool.in_use,
        live_tokens=live,
        seconds=seconds,
    )
