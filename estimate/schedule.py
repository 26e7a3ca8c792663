"""The time a run's work takes on one engine, from its workload and the measured rates: the two
schedules of splice/run/ (stream.py, and one engine call per unit) followed step by step.

Both are fluid simulations: every sequence of a kind generates the same expected length
(workload.py `Lengths`), so the sequences that start together finish together, and time advances
from one finish to the next. Between two finishes the live rows are fixed; a step decodes
`min(live, max_rows)` of them (the engine's row cap; rows beyond it wait and are served in turn,
which in the fluid view slows every live row by the same share), takes
`Rates.step_seconds(rows, slots)` for the distinct KV slots it reads (a group's shared prefix
once, each row's own tokens once per row: the engine's cascade), and the prompts that entered
since the last finish cost their prefill at the measured rate.

- **stream** (splice/run/stream.py): chunks start while fewer than `WINDOW_CHUNKS` chunks' base
  sequences are unfinished; a base's arms fork when it ends (the cut itself falls a little
  earlier, `Lengths.cut_share` of the way); the arms' stem is copied from the base's cache where
  the pool grows with the work (CPU) and computed again, once per fork group, where the pool
  has a budget (CUDA);
- **units**: each unit alone, in order, its rows all at once (each unit one engine call).

The shared start of each base's prompts (splice/experiment/shared_start.py) is computed once per
engine, as the engine computes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nudgeability.splice.run.stream import WINDOW_CHUNKS

from .rates import Rates
from .workload import BaseWork, Lengths, Workload

EPS = 1e-9


@dataclass
class Timeline:
    """What the simulated engine did: seconds, split by kind, and tokens."""

    seconds: float = 0.0
    decode_seconds: float = 0.0
    prefill_seconds: float = 0.0
    steps: float = 0.0
    prefill_tokens: float = 0.0
    generated_tokens: float = 0.0
    peak_rows: float = 0.0

    def prefill(self, tokens: float, rates: Rates) -> None:
        seconds = rates.prefill_seconds(tokens)
        self.prefill_tokens += tokens
        self.prefill_seconds += seconds
        self.seconds += seconds


@dataclass
class _Group:
    rows: float
    left: float  # tokens each row has still to generate
    context: float  # KV slots of its own each row attends to now
    shared: float = 0.0  # KV slots the group's rows share, read once a step for all of them
    base: BaseWork | None = None  # a base sequence (its arms fork when it ends)


@dataclass
class _Engine:
    rates: Rates
    max_rows: int | None
    timeline: Timeline = field(default_factory=Timeline)
    groups: list[_Group] = field(default_factory=list)
    started: set = field(default_factory=set)  # bases whose shared start is computed

    def admit(self, group: _Group, prefill: float, shared: tuple[str, int] | None = None) -> None:
        if shared is not None and shared[0] not in self.started:
            self.started.add(shared[0])
            prefill += shared[1]
        self.timeline.prefill(prefill, self.rates)
        self.groups.append(group)

    def advance(self) -> list[_Group]:
        """Decode until the next group ends; the groups that ended."""
        live = sum(g.rows for g in self.groups)
        rows = min(live, self.max_rows or live)
        share = rows / live
        steps = min(g.left for g in self.groups) / share
        # the mean distinct slots a step reads over these steps, in the rows it decodes
        slots = sum(g.shared + g.rows * (g.context + share * steps / 2) for g in self.groups)
        seconds = steps * self.rates.step_seconds(rows, slots * share)
        line = self.timeline
        line.seconds += seconds
        line.decode_seconds += seconds
        line.steps += steps
        line.generated_tokens += steps * rows
        line.peak_rows = max(line.peak_rows, rows)
        for g in self.groups:
            g.left -= share * steps
            g.context += share * steps
        done = [g for g in self.groups if g.left <= EPS]
        self.groups = [g for g in self.groups if g.left > EPS]
        return done


def _stem(base: BaseWork, lengths: Lengths, base_tokens: float) -> float:
    return base.prompt + lengths.cut_share * base_tokens


def stream_timeline(
    work: Workload,
    lengths: Lengths,
    rates: Rates,
    *,
    max_rows: int | None = None,
    reuse_stems: bool = True,
    window_chunks: int = WINDOW_CHUNKS,
) -> Timeline:
    """The streamed schedule of `work` on one engine (module docstring)."""
    engine = _Engine(rates, max_rows)
    base_tokens = lengths.base_share * work.base_budget
    arm_tokens = lengths.arm_share * work.arm_budget
    window = window_chunks * max((sum(map(len, c)) for c in work.chunks), default=0)
    chunks = list(work.chunks)

    def fork(base: BaseWork) -> None:
        rows = lengths.closes * len(base.arms)
        stem = _stem(base, lengths, base_tokens)
        if work.signals and base.phase == "B":
            engine.timeline.prefill(lengths.closes * (stem - base.shared), rates)
        if not rows or base_tokens <= 0:
            return
        splice = sum(base.arms) / len(base.arms)
        prefill = rows * splice
        if not reuse_stems:
            prefill += lengths.closes * (stem - base.shared)
        if arm_tokens > 0:
            engine.admit(_Group(rows, arm_tokens, splice, shared=stem), prefill)
        else:
            engine.timeline.prefill(prefill, rates)

    while chunks or engine.groups:
        # the stream's window counts every unfinished sequence, arms included
        while chunks and sum(g.rows for g in engine.groups) < max(1, window):
            for problem in chunks.pop(0):
                for base in problem:
                    own = base.prompt - base.shared
                    group = _Group(1.0, base_tokens, own, shared=base.shared, base=base)
                    engine.admit(group, base.prompt - base.shared, (base.phase, base.shared))
        if not engine.groups:
            continue
        if base_tokens <= 0:  # nothing to decode: every base ends at once
            ended, engine.groups = engine.groups, []
        else:
            ended = engine.advance()
        for group in ended:
            if group.base is not None:
                fork(group.base)
    return engine.timeline


def units_timeline(
    work: Workload, lengths: Lengths, rates: Rates, *, max_rows: int | None = None
) -> Timeline:
    """One engine call per unit, in order (module docstring): per chunk, each base phase, then
    the arms of the chunk's bases."""
    engine = _Engine(rates, max_rows)
    base_tokens = lengths.base_share * work.base_budget
    arm_tokens = lengths.arm_share * work.arm_budget

    def run(groups: list[tuple[_Group, float, tuple[str, int] | None]]) -> None:
        for group, prefill, shared in groups:
            engine.admit(group, prefill, shared)
        engine.groups = [g for g in engine.groups if g.left > EPS]
        while engine.groups:
            engine.advance()

    for chunk in work.chunks:
        bases = [b for problem in chunk for b in problem]
        for phase in dict.fromkeys(b.phase for b in bases):
            run(
                [
                    (
                        _Group(1.0, base_tokens, b.prompt - b.shared, shared=b.shared),
                        b.prompt - b.shared,
                        (b.phase, b.shared),
                    )
                    for b in bases
                    if b.phase == phase
                ]
            )
        forks = []
        for b in bases:
            if not b.arms:
                continue
            stem = _stem(b, lengths, base_tokens)
            if work.signals and b.phase == "B":
                engine.timeline.prefill(lengths.closes * (stem - b.shared), rates)
            rows = lengths.closes * len(b.arms)
            splice = sum(b.arms) / len(b.arms)
            group = _Group(rows, arm_tokens, splice, shared=stem)
            forks.append((group, rows * splice + lengths.closes * (stem - b.shared), None))
        run(forks)
    return engine.timeline
