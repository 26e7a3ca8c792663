"""The sampled-arms table of `nudge stats` (runs made with `nudge run --samples-per-arm N`).

One row per experiment and pair: the rows in I_S, the mean completed samples per arm, the mean
TOOL shares of the + and − arms (%), S over every sample (pp) with its 95% interval, and Table
1's S from the first samples on the same rows (stats/estimators/samples.py). The CSV holds the
same at full precision.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...estimators.samples import ExperimentSamples
from ..cells import fmt
from .columns import with_ci
from .grid import Grid

_HEADER = (
    "Model",
    "Task",
    "Decoding",
    "Pair",
    "n_S",
    "samples per arm",
    "TOOL + (%)",
    "TOOL − (%)",
    "S over samples (pp) [95% CI]",
    "S first samples (pp)",
)
CSV_COLUMNS = (
    "model",
    "task",
    "decoding",
    "pair",
    "n_S",
    "samples",
    "tool_plus",
    "tool_minus",
    "S",
    "S_low",
    "S_high",
    "S_first",
)


def samples_grid(experiments: Sequence[ExperimentSamples]) -> Grid:
    blocks, records = [], []
    for e in experiments:
        block = []
        for p in e.pairs:
            block.append(
                [
                    e.model,
                    e.task,
                    e.decoding,
                    p.pair,
                    str(p.n_S),
                    fmt(p.samples, 1),
                    fmt(100 * p.tool_plus, 1),
                    fmt(100 * p.tool_minus, 1),
                    with_ci(p.S, p.S_ci),
                    fmt(p.S_first, 1),
                ]
            )
            records.append(
                {
                    "model": e.model,
                    "task": e.task,
                    "decoding": e.decoding,
                    "pair": p.pair,
                    "n_S": p.n_S,
                    "samples": p.samples,
                    "tool_plus": p.tool_plus,
                    "tool_minus": p.tool_minus,
                    "S": p.S,
                    "S_low": p.S_ci.low,
                    "S_high": p.S_ci.high,
                    "S_first": p.S_first,
                }
            )
        blocks.append(block)
    return Grid(
        name="samples",
        caption="S over every sample of each arm (nudge run --samples-per-arm)",
        header=_HEADER,
        blocks=blocks,
        records=records,
        csv_columns=CSV_COLUMNS,
        notes=[
            "Each row (problem, seed) has a TOOL share per arm over its completed samples; S is "
            "the mean of the paired differences (− minus +), with a 95% problem-level bootstrap "
            "interval; the last column is Table 1's S from the first samples on the same rows."
        ],
    )
