"""S over every sample of each arm (runs made with `nudge run --samples-per-arm N`).

Table 1 reads one action per arm and row (problem, seed): the arm's first sample. With N
samples per arm, each row has a TOOL share per arm instead, and S becomes the mean of the
paired share differences:

    I_S      = rows with at least one completed sample (SELF, TOOL or OTHER) of both sides
    share(a) = (completed samples of arm a that are TOOL) / (completed samples of arm a), per row
    S_N      = 100 * mean_{I_S} ( share(-) - share(+) )

which is Table 1's S when N = 1. Its 95% interval is the percentile interval of the problem-level
bootstrap (stats/resampling/bootstrap.py `Resamples`: problems drawn with all their rows, the
same replicates and seed as every other interval). `S_first` is Table 1's S on the same rows,
from the first samples alone (the rows whose first samples both completed, as Table 1 keeps), so the two read side by side: the samples shrink the noise of the
decoding within a problem, not the spread between problems. Only the paper's cut is read (the
arms at extra cuts are the position view's, stats/position/).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from nudgeability.splice.experiment.conditions import SHIPPED_CONDITIONS, ConditionSet
from nudgeability.splice.rundir.records import Record

from ..actions import TOOL, action_code, completed
from ..resampling.bootstrap import Interval, Resamples, percentile_interval


@dataclass(frozen=True)
class SampledPair:
    """S of one pair over every sample (module docstring)."""

    pair: str
    n_S: int  # rows in I_S
    samples: float  # mean completed samples per arm and row in I_S
    tool_plus: float  # mean TOOL share of the + arm over I_S
    tool_minus: float
    S: float  # pp
    S_ci: Interval
    S_first: float  # pp, the first samples alone, on the rows of I_S whose first samples completed


@dataclass(frozen=True)
class ExperimentSamples:
    """The sampled pairs of one experiment (model, task, decoding), for stats.json `samples`."""

    model: str
    task: str
    decoding: str
    n_boot: int
    boot_seed: int
    pairs: list[SampledPair]


def sampled_pairs(
    records: Iterable[Record],
    *,
    n_boot: int = 2000,
    seed: int = 0,
    known: ConditionSet = SHIPPED_CONDITIONS,
) -> list[SampledPair]:
    """One `SampledPair` per pair of `known` with both sides present, in its order; [] when
    no arm has a further sample (a run without `--samples-per-arm`)."""
    actions: dict[str, dict[tuple[str, int], list[tuple[int, int]]]] = {}
    further = False
    for record in records:
        if record.at is not None or record.condition == "consistency":
            continue
        further |= record.sample is not None
        kept = actions.setdefault(record.condition, {})
        kept.setdefault((record.problem_id, record.seed), []).append(
            (-1 if record.sample is None else record.sample, action_code(record.action.kind))
        )
    if not further:
        return []
    found = []
    for name, pair in known.pairs.items():
        if pair.plus in actions and pair.minus in actions:
            found.append(_pair(name, actions[pair.plus], actions[pair.minus], n_boot, seed))
    return [p for p in found if p is not None]


def _share(samples: list[tuple[int, int]]) -> tuple[float, int]:
    codes = np.array([code for _, code in samples], dtype=np.int8)
    done = codes[completed(codes)]
    return (float((done == TOOL).mean()), len(done)) if len(done) else (np.nan, 0)


def _first(samples: list[tuple[int, int]]) -> float:
    code = np.int8(min(samples)[1])
    return float(code == TOOL) if completed(code) else np.nan


def _pair(name: str, plus: dict, minus: dict, n_boot: int, seed: int) -> SampledPair | None:
    shares = {k: (_share(plus[k]), _share(minus[k])) for k in plus if k in minus}
    kept = [k for k, ((_, a), (_, b)) in shares.items() if a and b]
    if not kept:
        return None
    share_plus = np.array([shares[k][0][0] for k in kept])
    share_minus = np.array([shares[k][1][0] for k in kept])
    counts = [shares[k][0][1] + shares[k][1][1] for k in kept]
    diff = share_minus - share_plus
    problems = {pid: i for i, pid in enumerate(dict.fromkeys(pid for pid, _ in kept))}
    draws = Resamples.draw(np.array([problems[pid] for pid, _ in kept]), n_boot, seed)
    weights = draws.counts[:, draws.unit].astype(np.float64)
    firsts = np.array([_first(minus[k]) - _first(plus[k]) for k in kept])
    return SampledPair(
        pair=name,
        n_S=len(kept),
        samples=sum(counts) / (2 * len(kept)),
        tool_plus=float(share_plus.mean()),
        tool_minus=float(share_minus.mean()),
        S=100.0 * float(diff.mean()),
        S_ci=percentile_interval(100.0 * (weights @ diff) / weights.sum(axis=1)),
        S_first=100.0 * float(firsts[np.isfinite(firsts)].mean())
        if np.isfinite(firsts).any()
        else float("nan"),
    )


def experiment_samples(
    records: Iterable[Record],
    label,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    known: ConditionSet = SHIPPED_CONDITIONS,
) -> ExperimentSamples | None:
    """The sampled pairs of one experiment's records (`label`: its ExperimentLabel; `known`:
    what its runs know); None for a run without further samples."""
    pairs = sampled_pairs(records, n_boot=n_boot, seed=seed, known=known)
    if not pairs:
        return None
    return ExperimentSamples(label.model, label.task, label.decoding, n_boot, seed, pairs)
