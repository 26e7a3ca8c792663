"""nudgeability.stats: every estimator of the paper as pure functions over int8 arrays.

Arrays: `s` (1 unaided correct, 0 wrong, -1 unknown) and action arrays coded SELF=0, TOOL=1,
OTHER=2, TRUNC=3, -1 = no arm (actions.py codes the kinds of models/families/action.py). An
experiment is an ExperimentTable, the per-problem action table (action_table.py); its conditions,
their report order and the +/- pairs come from nudgeability.splice.experiment.conditions. records.py joins
run directories into tables; summarize() gives every estimate with its 95% bootstrap interval
(numba kernels and numpy twins in kernels.py); report_tables.py (Markdown, CSV, LaTeX) and
figures.py render them; cli.py adds `nudge stats` and `nudge report`. Delegation value (runs made
with `nudge run --resolve`): delegation_value.py (estimators), delegation_summary.py (ValueTable,
intervals), delegation_records.py (join), delegation_tables.py / delegation_figures.py. Definitions
are in stats/README.md; each file states its own; profiles.py holds the profile rule.
"""

from .across import AcrossExperiments, Medians, across_experiments, spearman
from .action_table import CONDITIONS, PAIRS, ExperimentLabel, ExperimentTable, TableError
from .actions import NONE, OTHER, SELF, TOOL, TRUNC, UNKNOWN, action_code, codes_from_kinds
from .bootstrap import (
    BootstrapResult,
    Interval,
    bootstrap,
    bootstrap_clustered,
    bootstrap_units,
    percentile_interval,
)
from .contributions import contributions
from .delegation_records import load_value_tables
from .delegation_summary import DelegationValueSummary, ValueTable, summarize_value
from .delegation_value import (
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
from .diagnostics import (
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
from .mcnemar import McNemar, mcnemar
from .profiles import PROFILES, ProfileRule, profile_label
from .records import RecordsError, load_experiments, table_from_records
from .sensitivity import Sensitivity, sensitivity
from .summary import ExperimentSummary, PairSummary, summarize
from .targeting import Stratum, Targeting, targeting

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
    "CONDITIONS",
    "PAIRS",
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
