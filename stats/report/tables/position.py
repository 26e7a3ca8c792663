"""The by-position table of `nudge stats` (runs made with `nudge run --cuts`), as a Grid.

One row per experiment, pair and position (the bins of position/bins.py ascending, then the
paper's cut): the rows with an arm there, S (pp), WT (%) with WTrand (%), L (pp), each with its
95% interval, n_S, n_WT and the flip events F; when a run recorded likelihoods, the mean splice
log-probability of the + and − arms (nats) and S over the problems that have both (the
likelihood view, position/estimators.py). The CSV holds the same at full precision.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..cells import fmt
from .columns import with_ci
from .grid import Grid

_HEADER = (
    "Model",
    "Task",
    "Decoding",
    "Pair",
    "Position",
    "n",
    "S (pp) [95% CI]",
    "n_S",
    "WT (%) [95% CI]",
    "WTrand (%)",
    "L (pp) [95% CI]",
    "n_WT",
    "F",
)
_LIKELIHOOD_HEADER = ("log p + (nats)", "log p − (nats)", "S there (pp)", "n_lik")
CSV_COLUMNS = (
    "model",
    "task",
    "decoding",
    "cohort",
    "pair",
    "position",
    "low",
    "high",
    "paper",
    "mean_position",
    "n_rows",
    "S",
    "S_low",
    "S_high",
    "n_S",
    "WT",
    "WT_low",
    "WT_high",
    "WTrand",
    "WTrand_low",
    "WTrand_high",
    "L",
    "L_low",
    "L_high",
    "n_WT",
    "F",
    "H",
    "logprob_plus",
    "logprob_minus",
    "S_likelihood",
    "n_likelihood",
)


def _rows(positions: Sequence):
    for e in positions:
        for pair in e.pairs:
            for point in e.points:
                found = point.pairs.get(pair)
                if found is not None:
                    yield e, pair, point, found, point.likelihoods.get(pair)


def by_position(positions: Sequence) -> Grid:
    """The table of PositionSummary objects (module docstring)."""
    likelihoods = any(view is not None for *_, view in _rows(positions))
    header = [*_HEADER, *(_LIKELIHOOD_HEADER if likelihoods else ())]
    block, records = [], []
    for e, pair, point, p, view in _rows(positions):
        cells = [
            e.model,
            e.task,
            e.decoding,
            pair,
            point.bin.label,
            str(point.n_rows),
            with_ci(p.S, p.S_ci),
            str(p.n_S),
            with_ci(p.WT, p.WT_ci, 100),
            fmt(100 * p.WTrand),
            with_ci(p.L, p.L_ci, dagger=True),
            str(p.n_WT),
            str(p.F),
        ]
        if likelihoods:
            cells += (
                ["–", "–", "–", "0"]
                if view is None
                else [
                    fmt(view.logprob_plus, 2),
                    fmt(view.logprob_minus, 2),
                    fmt(view.S),
                    str(view.n),
                ]
            )
        block.append(cells)
        records.append(
            {
                "model": e.model,
                "task": e.task,
                "decoding": e.decoding,
                "cohort": e.cohort,
                "pair": pair,
                "position": point.bin.label,
                "low": point.bin.low,
                "high": point.bin.high,
                "paper": int(point.bin.paper),
                "mean_position": point.mean_position,
                "n_rows": point.n_rows,
                "S": p.S,
                "S_low": p.S_ci.low,
                "S_high": p.S_ci.high,
                "n_S": p.n_S,
                "WT": 100 * p.WT,
                "WT_low": 100 * p.WT_ci.low,
                "WT_high": 100 * p.WT_ci.high,
                "WTrand": 100 * p.WTrand,
                "WTrand_low": 100 * p.WTrand_ci.low,
                "WTrand_high": 100 * p.WTrand_ci.high,
                "L": p.L,
                "L_low": p.L_ci.low,
                "L_high": p.L_ci.high,
                "n_WT": p.n_WT,
                "F": p.F,
                "H": p.H,
                **(
                    {}
                    if view is None
                    else {
                        "logprob_plus": view.logprob_plus,
                        "logprob_minus": view.logprob_minus,
                        "S_likelihood": view.S,
                        "n_likelihood": view.n,
                    }
                ),
            }
        )
    bins = sorted({e.bins for e in positions})
    notes = [
        "Position: the cut's index over the base's think-close index (at / boundary), in "
        f"{' or '.join(map(str, bins))} equal-width bins; a (problem, seed) with several cuts in "
        "a bin keeps the one closest to the bin's centre (the earlier on a tie). The paper cut "
        "(1) is the experiment's own table. 95% intervals: bootstrap over problems "
        "(stats/README.md, By position).",
    ]
    if likelihoods:
        notes.append(
            "log p ±: the mean splice log-probability of the + and − arms (nats) over the "
            "problems of I_S that have both; S there: S over those problems."
        )
    return Grid(
        name="by_position",
        caption="By position: S, WT and L against where the arms were forked",
        header=header,
        blocks=[block],
        csv_columns=CSV_COLUMNS,
        records=records,
        notes=notes,
    )
