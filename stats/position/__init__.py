"""S, WT, WTrand and L as functions of where in the base's reasoning the arms were forked."""

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
