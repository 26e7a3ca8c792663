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

- **stream** (splice/run/stream.py): chunks start while fewer sequences are unfinished than
  the stream's `window` (its waiters: every sequence submitted and not finished, bases and arms
  alike, here the rows of every live group, those beyond the row cap included); a base's arms fork when it ends (a simplification: the
  stream forks at the cut, `Lengths.cut_share` of the way, while the base still runs); the arms'
  stem is copied from the base's cache where the pool grows with the work (CPU) and computed
  again, once per fork group, where the pool has a budget (CUDA);
- **units**: each unit alone, in order, its rows all at once (each unit one engine call, so it
  lasts as long as its longest sequence: the `Lengths` share of sequences that run to
  their budget sets that tail).

Lengths come in two parts (`parts`): the `*_at_budget` share of a kind's sequences runs to its
budget and the rest is shorter, so that the mean is `Lengths`'. A prefix that rows share is read
once a step (a base phase's shared start, splice/experiment/shared_start.py, for all its rows; a
fork's stem for its arms) and computed once per engine call that holds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nudgeability.splice.run.stream import WINDOW_CHUNKS, window

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
    key: object = None  # the prefix its rows share (read once a step by every group holding it)
    shared: float = 0.0  # that prefix's KV slots
    base: BaseWork | None = None  # a base sequence (its arms fork when it ends)


@dataclass
class _Engine:
    rates: Rates
    max_rows: int | None
    timeline: Timeline = field(default_factory=Timeline)
    groups: list[_Group] = field(default_factory=list)
    started: set = field(default_factory=set)  # shared starts computed in this engine call

    def admit(self, group: _Group, prefill: float, start: tuple | None = None) -> None:
        """`group` joins, its `prefill` computed; `start`: (key, tokens) of a shared start,
        computed once per engine call."""
        if start is not None and start[0] not in self.started:
            self.started.add(start[0])
            prefill += start[1]
        self.timeline.prefill(prefill, self.rates)
        self.groups.append(group)

    def ended(self) -> list[_Group]:
        """The groups with nothing left to generate, removed."""
        done = [g for g in self.groups if g.left <= EPS]
        self.groups = [g for g in self.groups if g.left > EPS]
        return done

    def advance(self) -> list[_Group]:
        """Decode until the next group ends; the groups that ended."""
        live = sum(g.rows for g in self.groups)
        rows = min(live, self.max_rows or live)
        share = rows / live
        steps = min(g.left for g in self.groups) / share
        # the mean distinct slots a step reads over these steps: each shared prefix once, the
        # rows' own slots for the rows it decodes
        prefixes = {g.key: g.shared for g in self.groups if g.key is not None}
        own = sum(g.rows * (g.context + share * steps / 2) for g in self.groups)
        slots = sum(prefixes.values()) + own * share
        seconds = steps * self.rates.step_seconds(rows, slots)
        line = self.timeline
        line.seconds += seconds
        line.decode_seconds += seconds
        line.steps += steps
        line.generated_tokens += steps * rows
        line.peak_rows = max(line.peak_rows, rows)
        for g in self.groups:
            g.left -= share * steps
            g.context += share * steps
        return self.ended()

    def drain(self) -> None:
        """Run until every group has ended (one engine call of the units schedule)."""
        self.ended()
        while self.groups:
            self.advance()


def parts(mean_share: float, at_budget: float, budget: int) -> list[tuple[float, float]]:
    """(share of the sequences, their new tokens): `at_budget` of them (at most the mean's
    share) run to `budget`, the rest generate what keeps the mean at `mean_share` of it."""
    top = min(at_budget, mean_share)
    if top <= 0:
        return [(1.0, mean_share * budget)]
    if top >= 1:
        return [(1.0, float(budget))]
    return [(1 - top, (mean_share - top) / (1 - top) * budget), (top, float(budget))]


def _base_groups(base: BaseWork, lengths: Lengths, budget: int) -> list[_Group]:
    own = base.prompt - base.shared
    key = ("start", base.phase, base.shared)
    return [
        _Group(share, tokens, own, key, base.shared, base)
        for share, tokens in parts(lengths.base_share, lengths.base_at_budget, budget)
    ]


class _Forks:
    """The arms of a base part that ended (`fork`), for either schedule."""

    def __init__(self, engine: _Engine, work: Workload, lengths: Lengths, reuse_stems: bool):
        self.engine, self.work, self.lengths, self.reuse = engine, work, lengths, reuse_stems

    def fork(self, group: _Group, generated: float) -> None:
        """Fork the arms of `group`'s base (`group.rows` of a base, which generated
        `generated` tokens); on the units schedule the stem is always computed again."""
        base, lengths, engine = group.base, self.lengths, self.engine
        closing = lengths.closes * group.rows
        stem = base.prompt + lengths.cut_share * generated
        if self.work.signals and base.phase == "B":  # B's hidden-state pass
            engine.timeline.prefill(closing * (stem - base.shared), engine.rates)
        rows = closing * len(base.arms)
        if rows <= 0:
            return
        splice = sum(base.arms) / len(base.arms)
        prefill = rows * splice + (0.0 if self.reuse else closing * (stem - base.shared))
        engine.timeline.prefill(prefill, engine.rates)
        key = object()  # the fork's own stem, read once a step for its arms
        for share, tokens in parts(lengths.arm_share, lengths.arm_at_budget, self.work.arm_budget):
            start = (("start", base.phase, base.shared), base.shared)
            engine.admit(_Group(rows * share, tokens, splice, key, stem), 0.0, start)


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
    forks = _Forks(engine, work, lengths, reuse_stems)
    # a chunk's base sequences: its problems' bases, every seed (a full chunk's, as the stream
    # counts them from the plan's chunk size)
    per_chunk = max((sum(map(len, c)) for c in work.chunks), default=0)
    most = window(per_chunk, window_chunks, max_rows)
    chunks = list(work.chunks)
    generated: dict[int, float] = {}  # id of a base group -> its new tokens
    while chunks or engine.groups:
        while chunks and sum(g.rows for g in engine.groups) < max(1, most):
            for problem in chunks.pop(0):
                for base in problem:
                    for group in _base_groups(base, lengths, work.base_budget):
                        generated[id(group)] = group.left
                        start = (group.key, base.shared)
                        engine.admit(group, group.rows * (base.prompt - base.shared), start)
        ended = engine.ended()
        if not ended and engine.groups:
            ended = engine.advance()
        for group in ended:
            if group.base is not None:
                forks.fork(group, generated.pop(id(group)))
    return engine.timeline


def units_timeline(
    work: Workload, lengths: Lengths, rates: Rates, *, max_rows: int | None = None
) -> Timeline:
    """One engine call per unit, in order (module docstring): per chunk, each base phase and
    seed, then each seed's arms of the chunk's bases, their stems computed again."""
    engine = _Engine(rates, max_rows)
    forks = _Forks(engine, work, lengths, reuse_stems=False)
    for chunk in work.chunks:
        bases = [b for problem in chunk for b in problem]
        ended: list[tuple[_Group, float]] = []
        for phase, seed in dict.fromkeys((b.phase, b.seed) for b in bases):
            engine.started.clear()
            for base in bases:
                if (base.phase, base.seed) != (phase, seed):
                    continue
                for group in _base_groups(base, lengths, work.base_budget):
                    ended.append((group, group.left))
                    start = (group.key, base.shared)
                    engine.admit(group, group.rows * (base.prompt - base.shared), start)
            engine.drain()
        for seed in dict.fromkeys(b.seed for b in bases):
            engine.started.clear()
            for group, generated in ended:
                if group.base.seed == seed:
                    forks.fork(group, generated)
            engine.drain()
    return engine.timeline
