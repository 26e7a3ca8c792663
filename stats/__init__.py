"""Every estimator of the paper as pure functions over int8 arrays (stats/README.md)."""

from nudgeability.splice.experiment.conditions import REPORT_ORDER, SHIPPED_PAIRS

from .actions import NONE, OTHER, SELF, TOOL, TRUNC, UNKNOWN, action_code, codes_from_kinds
from .delegation.join import load_value_tables
from .delegation.summary import DelegationValueSummary, summarize_value
from .delegation.table import ValueTable
from .delegation.value import (
    FinalAccuracy,
    FlipValue,
    ToolAccuracy,
    ValueSwing,
    final_accuracy,
    final_outcome,
    flip_value,
    tool_accuracy,
    value_swing,
)
from .estimators.across import AcrossExperiments, Medians, across_experiments, spearman
from .estimators.contributions import contributions
from .estimators.diagnostics import (
    ControlDeltas,
    FlipComposition,
    Gamma,
    OracleDiagnostics,
    Rate,
    SelfAnswerTransitions,
    control_deltas,
    delegation_rate,
    dself_rself,
    flip_composition,
    gamma,
    oracle_diagnostics,
)
from .estimators.intervals import BootstrapResult, bootstrap, bootstrap_clustered, bootstrap_units
from .estimators.mcnemar import McNemar, mcnemar
from .estimators.profiles import PROFILES, ProfileRule, profile_label
from .estimators.sensitivity import Sensitivity, sensitivity
from .estimators.summary import ExperimentSummary, PairSummary, summarize
from .estimators.targeting import Stratum, Targeting, targeting
from .records import RecordsError, load_experiments, table_from_records
from .resampling.bootstrap import Interval, percentile_interval
from .table import ExperimentLabel, ExperimentTable, TableError

__all__ = [
    "ValueTable",
    "DelegationValueSummary",
    "summarize_value",
    "load_value_tables",
    "final_outcome",
    "final_accuracy",
    "FinalAccuracy",
    "value_swing",
    "ValueSwing",
    "flip_value",
    "FlipValue",
    "tool_accuracy",
    "ToolAccuracy",
    "SELF",
    "TOOL",
    "OTHER",
    "TRUNC",
    "NONE",
    "UNKNOWN",
    "action_code",
    "codes_from_kinds",
    "ExperimentTable",
    "ExperimentLabel",
    "TableError",
    "REPORT_ORDER",
    "SHIPPED_PAIRS",
    "sensitivity",
    "Sensitivity",
    "targeting",
    "Targeting",
    "Stratum",
    "mcnemar",
    "McNemar",
    "gamma",
    "Gamma",
    "dself_rself",
    "SelfAnswerTransitions",
    "oracle_diagnostics",
    "OracleDiagnostics",
    "flip_composition",
    "FlipComposition",
    "delegation_rate",
    "control_deltas",
    "ControlDeltas",
    "Rate",
    "contributions",
    "bootstrap",
    "bootstrap_clustered",
    "bootstrap_units",
    "percentile_interval",
    "BootstrapResult",
    "Interval",
    "summarize",
    "ExperimentSummary",
    "PairSummary",
    "profile_label",
    "PROFILES",
    "ProfileRule",
    "across_experiments",
    "AcrossExperiments",
    "Medians",
    "spearman",
    "load_experiments",
    "table_from_records",
    "RecordsError",
]
