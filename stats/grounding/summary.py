"""ground(table, signals): signal quality and grounded-arm results of one experiment.

Every signal present in the run (signals.SIGNALS) gets its AUROC for s with a problem-bootstrap
interval and its ROC curve; the probe (when hidden states were stored) is cross-fitted and also
gets its ECE. The policies B, conf and doubt and one grounded arm per signal (with its sham and
lift, estimators.py) are scored on the one retained set I_D.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nudgeability.splice.experiment.conditions import PRIMARY_PAIR, SHIPPED_PAIRS

from ..resampling.bootstrap import NAN_INTERVAL, Interval, Resamples, percentile_interval
from .estimators import (
    GroundedArm,
    PolicyAccuracy,
    grounded_arm,
    policy_accuracies,
    retained_rows,
)
from .join import SignalData
from .signals import (
    DEFAULT_FOLDS,
    SIGNALS,
    auroc,
    auroc_replicates,
    crossfit,
    ece,
    ece_weighted,
    identity_fit,
    logistic_probe_fit,
    oriented,
    roc_curve,
)


@dataclass(frozen=True)
class SignalQuality:
    """AUROC of one oriented signal for s, its interval, the rows used and its ROC curve."""

    signal: str
    auroc: float
    auroc_ci: Interval
    n: int
    n_right: int
    fpr: tuple[float, ...]
    tpr: tuple[float, ...]


@dataclass(frozen=True)
class GroundingSummary:
    """Everything the grounded-nudge table and figures report for one experiment."""

    model: str
    task: str
    decoding: str
    n_rows: int
    n_problems: int
    folds: int
    samples: int  # self-consistency samples per row (K)
    signals: dict[str, SignalQuality]
    probe_ece: float
    probe_ece_ci: Interval
    policies: dict[str, PolicyAccuracy]  # B, conf, doubt on I_D
    grounded: dict[str, GroundedArm]  # one per signal

    @property
    def n_retained(self) -> int:
        """|I_D|: the rows every policy is scored on."""
        return next(iter(self.policies.values())).n if self.policies else 0


def signal_quality(name: str, score, s, resamples: Resamples) -> SignalQuality:
    """AUROC with its problem-bootstrap interval and the ROC curve of one oriented score."""
    score, s = np.asarray(score, dtype=np.float64), np.asarray(s)
    used = (s >= 0) & np.isfinite(score)
    boots = auroc_replicates(score, s, resamples)
    fpr, tpr = roc_curve(score, s)
    return SignalQuality(
        signal=name,
        auroc=auroc(score, s),
        auroc_ci=percentile_interval(boots),
        n=int(used.sum()),
        n_right=int((used & (s == 1)).sum()),
        fpr=tuple(float(x) for x in fpr),
        tpr=tuple(float(x) for x in tpr),
    )


def ground(
    table,
    data: SignalData,
    *,
    folds: int = DEFAULT_FOLDS,
    fold_seed: int = 0,
    n_boot: int = 20000,
    seed: int = 0,
) -> GroundingSummary | None:
    """The grounding results of an experiment table; None when it has no signal or no conf and
    doubt arms. Every row gets its fold from its problem (table.cluster)."""
    plus, minus, base = SHIPPED_PAIRS[PRIMARY_PAIR]  # conf, doubt, B: the first-person pair
    conf, doubt = table.actions(plus), table.actions(minus)
    if conf is None or doubt is None or not (data.raw or data.hidden is not None):
        return None
    s, cluster = table.s, table.cluster
    fits = {
        name: crossfit(oriented(name, raw), s, cluster, fit=identity_fit, k=folds, seed=fold_seed)
        for name, raw in data.raw.items()
    }
    if data.hidden is not None:
        fits["probe"] = crossfit(
            data.hidden, s, cluster, fit=logistic_probe_fit(), k=folds, seed=fold_seed
        )
    order = [name for name in SIGNALS if name in fits]
    resamples = Resamples.draw(cluster, n_boot, seed)  # one draw for every interval below
    quality = {name: signal_quality(name, fits[name].score, s, resamples) for name in order}
    probe_ece, probe_ci = float("nan"), NAN_INTERVAL
    if "probe" in fits:
        prob = fits["probe"].score
        probe_ece = ece(prob, s)
        boots = [ece_weighted(prob, s, w) for w in resamples.weights()]
        probe_ci = percentile_interval(np.concatenate(boots))
    retained = retained_rows(s, table.base, conf, doubt, *(fits[n].score for n in order))
    policies = policy_accuracies(
        s, {base: table.base, plus: conf, minus: doubt}, retained, resamples
    )
    grounded = {
        name: grounded_arm(name, s, conf, doubt, fits[name].says_right, retained, resamples)
        for name in order
    }
    label = table.label
    return GroundingSummary(
        model=label.model,
        task=label.task,
        decoding=label.decoding,
        n_rows=len(table),
        n_problems=table.n_problems,
        folds=folds,
        samples=data.samples,
        signals=quality,
        probe_ece=probe_ece,
        probe_ece_ci=probe_ci,
        policies=policies,
        grounded=grounded,
    )
