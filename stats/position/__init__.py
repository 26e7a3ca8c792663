"""S, WT, WTrand and L as functions of where in the base's reasoning the arms were forked.

A run made with `nudge run --cuts` forks its arms at extra cuts of the base's reasoning as well as
at the paper's cut, just before the think-close. bins.py places each cut by its relative
position (at / boundary) in equal-width bins and keeps one cut per (problem, seed, base) and bin;
join.py turns an experiment's records into one ExperimentTable per bin, and the paper's cut (the
experiment's own table); estimators.py computes every pair's S, WT, WTrand and L there with the
project's bootstrap intervals, and the likelihood view (`summarize_positions`). stats.json holds
the result under `by_position` only for runs with extra cuts. Definitions: stats/README.md,
"By position".
"""

from .bins import (
    DEFAULT_BINS,
    PositionBin,
    bin_index,
    choose_cut,
    paper_point,
    position_bins,
    relative_position,
)
from .estimators import (
    PairAtPosition,
    PositionPoint,
    PositionSummary,
    SpliceLikelihood,
    pair_at_position,
    position_point,
    splice_likelihood,
    summarize_positions,
)
from .join import PositionTable, PositionTables, position_tables

__all__ = [
    "DEFAULT_BINS",
    "PairAtPosition",
    "PositionBin",
    "PositionPoint",
    "PositionSummary",
    "PositionTable",
    "PositionTables",
    "SpliceLikelihood",
    "bin_index",
    "choose_cut",
    "pair_at_position",
    "paper_point",
    "position_bins",
    "position_point",
    "position_tables",
    "relative_position",
    "splice_likelihood",
    "summarize_positions",
]
