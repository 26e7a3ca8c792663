"""summarize(table): every estimate of one experiment, with intervals and retained counts.

Names follow the paper: S and n_S; WT, WTrand, L with n_WT, the flip events F and the
well-targeted flips H; Gamma; Dself and Rself; rho, omega and Phi of the oracle control.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nudgeability.splice.experiment.conditions import (
    PRIMARY_PAIR,
    SHIPPED_CONDITIONS,
    ConditionSet,
)

from ..resampling.bootstrap import Interval
from ..table import ExperimentTable, TableError
from . import diagnostics
from .intervals import BootstrapResult, bootstrap, bootstrap_clustered, pair_arrays
from .mcnemar import McNemar, mcnemar
from .profiles import ProfileRule
from .ratios import Estimate, ratio_estimates
from .seeds import RepeatedLabels, SeedSpread, repeated_labels, seed_spread
from .sensitivity import sensitivity
from .targeting import Stratum, targeting


@dataclass(frozen=True)
class PairEstimates:
    """S, WT, WTrand and L of one (+, -) pair with their intervals and counts: what every view
    of a pair reports (Table 1's `PairSummary`, the position view's `PairAtPosition`)."""

    pair: str
    S: float
    S_ci: Interval
    n_S: int
    tool_plus: int
    tool_minus: int
    WT: float
    WT_ci: Interval
    WTrand: float
    WTrand_ci: Interval
    L: float
    L_ci: Interval
    n_WT: int
    F: int
    H: int


@dataclass(frozen=True)
class PairSummary(PairEstimates):
    """S, WT, WTrand and L of one (+, -) pair, with intervals, counts and McNemar's test."""

    n_events: int
    strata: tuple[Stratum, ...]
    mcnemar: McNemar
    flips: diagnostics.FlipComposition
    bootstrap_undefined: dict[str, int]

    @property
    def L_significant(self) -> bool:
        """The dagger of Table 1: L's interval excludes 0."""
        return self.L_ci.excludes_zero


@dataclass(frozen=True)
class ExperimentSummary:
    """Everything `nudge stats` reports for one experiment (model x task x decoding)."""

    model: str
    task: str
    decoding: str
    seeds: tuple[int, ...]
    n_problems: int
    n_rows: int
    n_boot: int
    boot_seed: int
    clustered: bool
    primary: PairSummary
    profile: str  # read with `profile_rule` (profiles.py)
    pairs: dict[str, PairSummary]
    per_seed: dict[int, PairSummary]
    unaided_accuracy: diagnostics.Rate
    delegation: dict[str, diagnostics.Rate]
    gamma: diagnostics.Gamma
    controls: diagnostics.ControlDeltas
    self_answers: diagnostics.SelfAnswerTransitions | None
    oracle: diagnostics.OracleDiagnostics | None
    profile_rule: ProfileRule = ProfileRule()
    continuation: str = "token"  # token / text / chat: below token level it is reported apart
    cohort: str = "open-weight"  # or "provider-served": from the manifest (records/cohorts.py)
    # every ratio diagnostic with its interval (ratios.py): delegation.<code>, gamma, dself, ...
    estimates: dict[str, Estimate] = field(default_factory=dict)
    seed_spread: SeedSpread | None = None  # sampled runs: the spread across seeds (seeds.py)
    repeated_labels: RepeatedLabels | None = None  # sampled runs: the repeated-label check
    # the conditions its runs know (the table's): the report's order, labels and pair headers
    known: ConditionSet = SHIPPED_CONDITIONS

    # The paper's headline names, read from the primary (first-person) pair.
    S = property(lambda self: self.primary.S)
    S_ci = property(lambda self: self.primary.S_ci)
    n_S = property(lambda self: self.primary.n_S)
    WT = property(lambda self: self.primary.WT)
    WT_ci = property(lambda self: self.primary.WT_ci)
    WTrand = property(lambda self: self.primary.WTrand)
    WTrand_ci = property(lambda self: self.primary.WTrand_ci)
    L = property(lambda self: self.primary.L)
    L_ci = property(lambda self: self.primary.L_ci)
    n_WT = property(lambda self: self.primary.n_WT)
    F = property(lambda self: self.primary.F)
    H = property(lambda self: self.primary.H)
    flips = property(lambda self: self.primary.flips)


def summarize_pair(table: ExperimentTable, pair: str, boot: BootstrapResult) -> PairSummary:
    """Point estimates of one pair on `table`, joined with its bootstrap intervals."""
    base, conf, doubt = pair_arrays(table, pair)
    sens, targ = sensitivity(conf, doubt), targeting(table.s, base, conf, doubt)
    return PairSummary(
        pair=pair,
        S=sens.S,
        S_ci=boot.S,
        n_S=sens.n_S,
        tool_plus=sens.tool_plus,
        tool_minus=sens.tool_minus,
        WT=targ.WT,
        WT_ci=boot.WT,
        WTrand=targ.WTrand,
        WTrand_ci=boot.WTrand,
        L=targ.L,
        L_ci=boot.L,
        n_WT=targ.n_WT,
        F=targ.F,
        H=targ.H,
        n_events=targ.n_events,
        strata=targ.strata,
        mcnemar=mcnemar(conf, doubt),
        flips=diagnostics.flip_composition(table.s, base, conf, doubt),
        bootstrap_undefined=boot.undefined,
    )


def summarize(
    table: ExperimentTable,
    n_boot: int = 20000,
    seed: int = 0,
    profile_rule: ProfileRule | None = None,
) -> ExperimentSummary:
    """Every point estimate, 95% percentile interval and retained count of one experiment.

    The profile is read with `profile_rule` (default thresholds: profiles.py).

    Every pair present in the table is summarised (first person, voices, sealed, oracle); the
    primary pair (conf, doubt) is required. Tables with several seeds per problem are pooled and
    bootstrapped by cluster (bootstrap_clustered); each seed is also summarised on its own.
    """
    if not table.has_pair(PRIMARY_PAIR):
        label = table.label
        raise TableError(
            f"experiment {label.model}/{label.task}/{label.decoding}: no conf and doubt arms "
            "(the primary pair); run those conditions before `nudge stats`"
        )
    resample = bootstrap_clustered if table.is_clustered else bootstrap
    pairs = {
        name: summarize_pair(table, name, resample(table, n_boot, seed, pair=name))
        for name in table.known.pairs
        if table.has_pair(name)
    }
    per_seed = {}
    if len(table.seeds) > 1:
        for value in table.seeds:
            rows = table.for_seed(value)
            per_seed[value] = summarize_pair(rows, PRIMARY_PAIR, bootstrap(rows, n_boot, seed))
    primary = pairs[PRIMARY_PAIR]
    rule = profile_rule or ProfileRule()
    labelled = table.s >= 0
    oracle_base = table.actions("oracle_B")
    base_correct = table.correct.get("B")
    return ExperimentSummary(
        model=table.label.model,
        task=table.label.task,
        decoding=table.label.decoding,
        continuation=table.label.continuation,
        seeds=table.seeds,
        n_problems=table.n_problems,
        n_rows=len(table),
        n_boot=int(n_boot),
        boot_seed=int(seed),
        clustered=table.is_clustered,
        primary=primary,
        profile=rule.label(primary.S, primary.S_ci, primary.L, primary.L_ci),
        pairs=pairs,
        per_seed=per_seed,
        unaided_accuracy=diagnostics.Rate(int((table.s == 1).sum()), int(labelled.sum())),
        delegation={
            c: diagnostics.delegation_rate(table.actions(c))
            for c in table.known.report_order
            if table.actions(c) is not None
        },
        gamma=diagnostics.gamma(table.s, table.base),
        controls=diagnostics.control_deltas(
            table.base, table.actions("empty"), table.actions("neutral")
        ),
        self_answers=None
        if base_correct is None
        else diagnostics.dself_rself(table.s, table.base, base_correct),
        oracle=None
        if oracle_base is None
        else diagnostics.oracle_diagnostics(table.s, table.base, oracle_base),
        profile_rule=rule,
        cohort=table.label.cohort,
        estimates=ratio_estimates(table, n_boot, seed),
        seed_spread=seed_spread(table, per_seed),
        repeated_labels=repeated_labels(table),
        known=table.known,
    )
