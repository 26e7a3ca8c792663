"""The exact action-opener probabilities against the actions the model took (`--likelihoods`).

A run made with `nudge run --likelihoods` records on every sealed arm (and on the open arms
`--score-openers` names) P(TOOL) and P(answer): the probabilities of the family's tool-call
opener and of the task's answer opener right after the think-close, each the product of its
tokens' conditionals, teacher-forced (splice/README.md, *Likelihoods*). The arm's record also
holds the action it took. This module sets the two side by side, per arm condition at the
paper's cut:

- `p_tool`, `p_answer`: the mean exact probabilities over the rows (problem, seed) that carry
  them;
- `tool_share`, `self_share`: the shares of TOOL and SELF among those rows' actions, every
  sample of `--samples-per-arm` counted (each row weighs its samples equally);
- `gap = tool_share - p_tool`, with a 95% percentile interval from the problem-level bootstrap
  (stats/resampling/bootstrap.py `Resamples`: problems drawn with all their rows).

How to read the gap. Decoding at temperature 1 with no top-p truncation draws the opener with
probability exactly P(TOOL), so TOOL's share then estimates P(TOOL) plus the calls that begin
later than right after the close (a parser reads a call anywhere in the action,
models/families/), and the gap is at least zero up to sampling noise. Under top-p 0.95 (the
sampled decoding) or greedy decoding the sampled share follows a truncated or argmax rule, and
the gap says how far the decision the model took lies from its own probability.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from nudgeability.splice.rundir.records import Record

from ..actions import SELF, TOOL, action_code
from ..resampling.bootstrap import Interval, Resamples, percentile_interval


@dataclass(frozen=True)
class OpenerCheck:
    """P(TOOL) exact against the TOOL share of one arm condition (module docstring)."""

    condition: str
    n_rows: int  # (problem, seed) rows with the opener probabilities
    n_actions: int  # actions counted on those rows (samples included)
    p_tool: float
    p_answer: float
    tool_share: float
    self_share: float
    gap: float  # tool_share - p_tool
    gap_ci: Interval


def opener_checks(
    records: Iterable[Record], *, n_boot: int = 2000, seed: int = 0
) -> list[OpenerCheck]:
    """One `OpenerCheck` per arm condition whose records at the paper's cut carry P(TOOL), in
    order of first appearance; [] for a run without them."""
    rows: dict[str, dict[tuple[str, int], list]] = {}
    for record in records:
        scored = record.likelihoods
        if record.at is not None or scored is None or scored.tool_opener_logprob is None:
            continue
        row = rows.setdefault(record.condition, {}).setdefault(
            (record.problem_id, record.seed), [scored.p_tool, scored.p_answer, []]
        )
        row[2].append(action_code(record.action.kind))
    return [_check(code, found, n_boot, seed) for code, found in rows.items()]


def _check(code: str, found: dict, n_boot: int, seed: int) -> OpenerCheck:
    keys = list(found)
    p_tool = np.array([found[k][0] for k in keys])
    p_answer = np.array([found[k][1] for k in keys])
    tool = np.array([np.mean([a == TOOL for a in found[k][2]]) for k in keys])
    self_ = np.array([np.mean([a == SELF for a in found[k][2]]) for k in keys])
    problems = {pid: i for i, pid in enumerate(dict.fromkeys(pid for pid, _ in keys))}
    cluster = np.array([problems[pid] for pid, _ in keys])
    draws = Resamples.draw(cluster, n_boot, seed)
    weights = draws.counts[:, draws.unit].astype(np.float64)  # (replicates, rows)
    gaps = weights @ (tool - p_tool) / weights.sum(axis=1)
    return OpenerCheck(
        condition=code,
        n_rows=len(keys),
        n_actions=sum(len(found[k][2]) for k in keys),
        p_tool=float(p_tool.mean()),
        p_answer=float(p_answer.mean()),
        tool_share=float(tool.mean()),
        self_share=float(self_.mean()),
        gap=float((tool - p_tool).mean()),
        gap_ci=percentile_interval(gaps),
    )


@dataclass(frozen=True)
class ExperimentOpeners:
    """The opener checks of one experiment (model, task, decoding), for stats.json `openers`."""

    model: str
    task: str
    decoding: str
    n_boot: int
    boot_seed: int
    checks: list[OpenerCheck]


def experiment_openers(
    records: Iterable[Record], label, *, n_boot: int = 2000, seed: int = 0
) -> ExperimentOpeners | None:
    """The checks of one experiment's records (`label`: its ExperimentLabel); None without any."""
    checks = opener_checks(records, n_boot=n_boot, seed=seed)
    if not checks:
        return None
    return ExperimentOpeners(label.model, label.task, label.decoding, n_boot, seed, checks)
