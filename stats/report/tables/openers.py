"""The opener table of `nudge stats` (runs made with `nudge run --likelihoods`), as a Grid.

One row per experiment and arm condition whose records carry P(TOOL): the rows, the actions
counted (samples included), mean P(TOOL) and P(answer) (%), the TOOL and SELF shares of the
actions (%), and the gap TOOL share − P(TOOL) (pp) with its 95% interval
(stats/estimators/openers.py). The CSV holds the same at full precision.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...estimators.openers import ExperimentOpeners
from ..cells import fmt
from .columns import with_ci
from .grid import Grid

_HEADER = (
    "Model",
    "Task",
    "Decoding",
    "Arm",
    "n",
    "actions",
    "P(TOOL) (%)",
    "P(answer) (%)",
    "TOOL share (%)",
    "SELF share (%)",
    "gap (pp) [95% CI]",
)
CSV_COLUMNS = (
    "model",
    "task",
    "decoding",
    "condition",
    "n_rows",
    "n_actions",
    "p_tool",
    "p_answer",
    "tool_share",
    "self_share",
    "gap",
    "gap_low",
    "gap_high",
)


def opener_grid(experiments: Sequence[ExperimentOpeners]) -> Grid:
    blocks, records = [], []
    for e in experiments:
        block = []
        for c in e.checks:
            block.append(
                [
                    e.model,
                    e.task,
                    e.decoding,
                    c.condition,
                    str(c.n_rows),
                    str(c.n_actions),
                    fmt(100 * c.p_tool, 1),
                    fmt(100 * c.p_answer, 1),
                    fmt(100 * c.tool_share, 1),
                    fmt(100 * c.self_share, 1),
                    with_ci(c.gap, c.gap_ci, scale=100),
                ]
            )
            records.append(
                {
                    "model": e.model,
                    "task": e.task,
                    "decoding": e.decoding,
                    "condition": c.condition,
                    "n_rows": c.n_rows,
                    "n_actions": c.n_actions,
                    "p_tool": c.p_tool,
                    "p_answer": c.p_answer,
                    "tool_share": c.tool_share,
                    "self_share": c.self_share,
                    "gap": c.gap,
                    "gap_low": c.gap_ci.low,
                    "gap_high": c.gap_ci.high,
                }
            )
        blocks.append(block)
    return Grid(
        name="openers",
        caption="Exact P(TOOL) right after the think-close against the actions taken",
        header=_HEADER,
        blocks=blocks,
        records=records,
        csv_columns=CSV_COLUMNS,
        notes=[
            "P(TOOL), P(answer): the probabilities of the tool-call and answer openers right "
            "after the think-close (nudge run --likelihoods), averaged over the rows; the shares "
            "count every action of those rows, samples included. gap = TOOL share − P(TOOL), "
            "with a 95% problem-level bootstrap interval. At temperature 1 without top-p the "
            "gap is at least 0 up to noise (a call may also begin later than the close); "
            "greedy or top-p decoding follows another rule (stats/README.md)."
        ],
    )
