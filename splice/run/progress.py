"""The run's progress: a bar per phase, and the ETA of the whole run on each.

The ETA counts what is left in tokens: each phase's sequences still to compute (its problems x
seeds, the self-consistency samples, every arm of B and oracle_B) times the mean new tokens a
sequence of that phase has generated so far in this run (half its budget until one has), over
the tokens generated per second of wall time since the first computed unit began. The
resolution phase, whose calls are not known ahead, is not in it. `nudge plan`
(costs/README.md) estimates the same work before the run starts.
"""

from __future__ import annotations

import time

from nudgeability.splice.experiment.conditions import CONSISTENCY
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.units import UnitCounts
from nudgeability.splice.rundir.plan import ARMS_PHASE, RESOLVE_PHASE, Plan, Unit
from nudgeability.util.progress import progress_bar


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


class RunEta:
    """The time left in a run (module docstring), told of every unit done."""

    def __init__(self, plan: Plan, config: RunConfig):
        self.left: dict[str, int] = {}  # phase -> sequences still to compute
        self.budget: dict[str, int] = {}
        arms = sum(len(plan.arms_of(base)) for base in plan.arm_bases)
        for unit in plan.units():
            if unit.phase == RESOLVE_PHASE:
                continue
            problems = len(plan.chunks[unit.chunk])
            per = {ARMS_PHASE: arms, CONSISTENCY: plan.samples}.get(unit.phase, 1)
            self.left[unit.phase] = self.left.get(unit.phase, 0) + problems * per
            arm = unit.phase == ARMS_PHASE
            self.budget[unit.phase] = config.max_new_tokens_arm if arm else config.max_new_tokens
        self.sequences = dict.fromkeys(self.left, 0)
        self.tokens = dict.fromkeys(self.left, 0)
        self.began: float | None = None

    def done(self, unit: Unit, expected: int, counts: UnitCounts | None) -> None:
        """`unit` is written (`counts` None: reused from the store); `expected`: its sequences."""
        if unit.phase not in self.left:
            return
        self.left[unit.phase] -= expected  # an arm whose base did not close: none to compute
        if counts is None:
            return
        self.sequences[unit.phase] += counts.sequences
        self.tokens[unit.phase] += counts.generated_tokens
        began = time.perf_counter() - counts.seconds
        self.began = began if self.began is None else min(self.began, began)

    def seconds_left(self) -> float | None:
        """None until a computed unit has generated tokens."""
        made = sum(self.tokens.values())
        if self.began is None or not made:
            return None
        rate = made / max(time.perf_counter() - self.began, 1e-9)
        left = 0.0
        for phase, count in self.left.items():
            seen = self.sequences[phase]
            mean = self.tokens[phase] / seen if seen else self.budget[phase] / 2
            left += max(0, count) * mean
        return left / rate


class PhaseBar:
    """A progress bar per phase (tqdm on a terminal, plain lines in a log: util/progress.py):
    problems done (over all seeds), arms decoded, prompt and generated tokens per second of wall
    time since the phase's first computed unit began (resumed units count as done, with no
    tokens), and the run's ETA. In the stream the phases overlap, and each bar's rate is its
    phase's share."""

    def __init__(self, phase: str, units: list[Unit], plan: Plan, enabled: bool, eta: RunEta):
        self.chunks = plan.chunks
        self.arms = phase == ARMS_PHASE
        self.eta = eta
        self.per_problem = (
            sum(len(plan.arms_of(b)) for b in plan.arm_bases)
            if self.arms
            else plan.samples
            if phase == CONSISTENCY
            else 1
        )
        total = sum(len(self.chunks[unit.chunk]) for unit in units)
        self.bar = progress_bar(
            total, f"{phase:>8}", "problem", enabled=enabled, dynamic_ncols=True
        )
        self.sequences = self.tokens = self.prefill = 0
        self.began: float | None = None

    def done(self, unit: Unit, counts: UnitCounts | None) -> None:
        problems = len(self.chunks[unit.chunk])
        self.eta.done(unit, problems * self.per_problem, counts)
        if counts is not None:
            self.sequences += counts.sequences
            self.tokens += counts.generated_tokens
            self.prefill += counts.prefill_tokens + counts.shared_prefill_tokens
            began = time.perf_counter() - counts.seconds
            self.began = began if self.began is None else min(self.began, began)
        seconds = 1e-9 if self.began is None else max(time.perf_counter() - self.began, 1e-9)
        postfix = {
            "prefill tok/s": f"{self.prefill / seconds:.0f}",
            "decode tok/s": f"{self.tokens / seconds:.1f}",
        }
        if self.arms:
            postfix = {"arms": self.sequences, **postfix}
        left = self.eta.seconds_left()
        if left is not None:
            postfix["ETA"] = _clock(left)
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(problems)

    def __enter__(self) -> PhaseBar:
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()
