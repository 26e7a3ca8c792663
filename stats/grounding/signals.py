"""The model's own uncertainty signals as scores of competence: AUROC, ECE, cross-fitting.

A *signal* is one number per row (problem, seed) computed in the run from the model's outputs
(splice/rundir/records.py, `Signals`). Each is oriented so that a higher score means "more likely right":

    entropy_mean   -(mean token entropy of B's reasoning up to the cut, nats)
    entropy_max    -(largest token entropy of B's reasoning up to the cut)
    nll_mean       -(mean negative log-probability of B's reasoning tokens up to the cut)
    consistency    agreement of K unaided samples with their majority answer, in [0, 1]
    probe          P(s = 1) from a logistic-regression probe on B's hidden state at the cut,
                   cross-fitted (each row scored by a probe fitted without its problem)

Signal quality is the AUROC of the oriented score for s (1 = NT correct), ties counting one half
(the Mann-Whitney form): 0.5 is no information, 1 a perfect ranking. The probe's calibration is
its expected calibration error over 10 equal-width probability bins.

Cross-fitting (`crossfit`): problems, not rows, are split into k folds (the rows of one problem,
its seeds, always share a fold); for each fold a scorer is fitted on the other folds' rows only,
then scores the fold's rows, and the fold's threshold is the median of that scorer's scores on
its own training rows. A row is therefore never scored, nor thresholded, by anything that saw
its problem's label.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np

# name -> (orientation, description): score = orientation * raw value
SIGNALS = {
    "entropy_mean": (-1.0, "mean token entropy of B's reasoning up to the cut (negated)"),
    "entropy_max": (-1.0, "largest token entropy of B's reasoning up to the cut (negated)"),
    "nll_mean": (-1.0, "mean negative log-probability of B's reasoning up to the cut (negated)"),
    "consistency": (1.0, "agreement of K unaided samples with their majority answer"),
    "probe": (1.0, "cross-fitted logistic-regression probe on B's hidden state at the cut"),
}
DEFAULT_FOLDS = 5
ECE_BINS = 10


def oriented(name: str, raw: np.ndarray) -> np.ndarray:
    """The score of signal `name` from its raw values: higher = more likely right."""
    if name not in SIGNALS:
        raise ValueError(f"unknown signal {name!r}: expected one of {', '.join(SIGNALS)}")
    return SIGNALS[name][0] * np.asarray(raw, dtype=np.float64)


def auroc(score: np.ndarray, s: np.ndarray, weight: np.ndarray | None = None) -> float:
    """P(score of a right row > score of a wrong row) + P(tie) / 2, over rows with known s
    and finite score; NaN without both classes. `weight` repeats rows (bootstrap counts)."""
    score, s = np.asarray(score, dtype=np.float64), np.asarray(s)
    w = np.ones(len(s)) if weight is None else np.asarray(weight, dtype=np.float64)
    return float(auroc_weighted(score, s, w[None, :])[0])


def auroc_replicates(score: np.ndarray, s: np.ndarray, resamples) -> np.ndarray:
    """AUROC in every bootstrap replicate of `resamples` (resampling.bootstrap.Resamples), by the
    numba kernel weighted_auroc (whose numpy twin is auroc_weighted)."""
    keep = (np.asarray(s) >= 0) & np.isfinite(score)
    score, s, unit = (
        np.asarray(score, dtype=np.float64)[keep],
        np.asarray(s)[keep],
        resamples.unit[keep],
    )
    order = np.argsort(score, kind="stable")
    score = score[order]
    level_end = np.append(np.flatnonzero(score[1:] != score[:-1]) + 1, len(score)).astype(np.int64)
    if not len(score):
        return np.full(resamples.n_boot, np.nan)
    right = (s[order] == 1).astype(np.int8)
    return weighted_auroc(resamples.counts, unit[order].astype(np.int64), right, level_end)


def auroc_weighted(score: np.ndarray, s: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUROC for each row of `weights` (replicates x rows): rows are counted weight times. The
    numpy twin of weighted_auroc (auroc_replicates), equal to it bit for bit.

    Sorted unique score levels turn the pairwise count into cumulative sums: a right row at
    level l beats every wrong row below l and ties with the wrong rows at l.
    """
    keep = (np.asarray(s) >= 0) & np.isfinite(score)
    score, s = np.asarray(score, dtype=np.float64)[keep], np.asarray(s)[keep]
    if not len(score):
        return np.full(len(weights), np.nan)
    order = np.argsort(score, kind="stable")
    score, s, weights = (
        score[order],
        s[order],
        np.asarray(weights, dtype=np.float64)[:, keep][:, order],
    )
    starts = np.flatnonzero(np.r_[True, score[1:] != score[:-1]])  # first row of each level
    right = np.add.reduceat(weights * (s == 1), starts, axis=1)  # (replicates, levels)
    wrong = np.add.reduceat(weights * (s == 0), starts, axis=1)
    below = np.cumsum(wrong, axis=1) - wrong
    pairs = right.sum(axis=1) * wrong.sum(axis=1)
    won = (right * (below + 0.5 * wrong)).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pairs > 0, won / pairs, np.nan)


@numba.njit(parallel=True, cache=True)
def weighted_auroc(counts, unit, right, level_end):
    """AUROC per replicate (n_boot,) float64: rows, sorted by score, count counts[r, unit[row]]
    times; `right` (rows,) is 1 for s = 1 and 0 for s = 0; `level_end[l]` is one past the last
    row of the l-th run of equal scores. A right row beats the wrong rows of lower levels and
    ties with those of its own (Mann-Whitney); NaN without both classes. Every sum is of integers
    and halves, so the result is exact whatever the order: the twin (auroc_weighted) gives
    the same floats."""
    n_boot = counts.shape[0]
    out = np.empty(n_boot, dtype=np.float64)
    for r in numba.prange(n_boot):
        below = 0.0
        n_right = 0.0
        won = 0.0
        start = 0
        for end in level_end:
            level_right = 0.0
            level_wrong = 0.0
            for row in range(start, end):
                w = counts[r, unit[row]]
                if right[row]:
                    level_right += w
                else:
                    level_wrong += w
            won += level_right * (below + 0.5 * level_wrong)
            below += level_wrong
            n_right += level_right
            start = end
        pairs = n_right * below
        out[r] = won / pairs if pairs > 0 else np.nan
    return out


def roc_curve(score: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(false-positive rate, true-positive rate) at every threshold, from (0, 0) to (1, 1);
    a row is called right when its score is at least the threshold."""
    keep = (np.asarray(s) >= 0) & np.isfinite(score)
    score, s = np.asarray(score, dtype=np.float64)[keep], np.asarray(s)[keep]
    levels = np.unique(score)[::-1]
    n_right, n_wrong = int((s == 1).sum()), int((s == 0).sum())
    tpr = [0.0] + [((score >= t) & (s == 1)).sum() / max(n_right, 1) for t in levels]
    fpr = [0.0] + [((score >= t) & (s == 0)).sum() / max(n_wrong, 1) for t in levels]
    return np.asarray(fpr), np.asarray(tpr)


def ece(prob: np.ndarray, s: np.ndarray, weight: np.ndarray | None = None) -> float:
    """Expected calibration error: sum over 10 equal-width bins of P(bin) |mean s - mean p|."""
    prob, s = np.asarray(prob, dtype=np.float64), np.asarray(s)
    w = np.ones(len(s)) if weight is None else np.asarray(weight, dtype=np.float64)
    return float(ece_weighted(prob, s, w[None, :])[0])


def ece_weighted(prob: np.ndarray, s: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """ECE for each row of `weights` (replicates x rows); bins [0, .1), ..., [.9, 1]."""
    keep = (np.asarray(s) >= 0) & np.isfinite(prob)
    prob, s = np.asarray(prob)[keep], np.asarray(s)[keep]
    weights = np.asarray(weights, dtype=np.float64)[:, keep]
    bins = np.minimum((prob * ECE_BINS).astype(np.int64), ECE_BINS - 1)
    onehot = np.zeros((len(prob), ECE_BINS))
    onehot[np.arange(len(prob)), bins] = 1.0
    count, hits, mass = weights @ onehot, (weights * s) @ onehot, (weights * prob) @ onehot
    total = count.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, np.abs(hits - mass).sum(axis=1) / total, np.nan)


# ---------------------------------------------------------------- cross-fitting


def fold_of(cluster: np.ndarray, k: int = DEFAULT_FOLDS, seed: int = 0) -> np.ndarray:
    """The fold (0..k-1) of each row: problems (clusters) shuffled by `seed`, dealt round-robin,
    so folds differ in size by at most one problem and a problem's rows share a fold."""
    if k < 2:
        raise ValueError(f"cross-fitting needs at least 2 folds, got {k}")
    problems = np.unique(cluster)
    order = np.random.default_rng(seed).permutation(len(problems))
    fold_of_problem = np.empty(len(problems), dtype=np.int64)
    fold_of_problem[order] = np.arange(len(problems)) % k
    return fold_of_problem[np.searchsorted(problems, cluster)]


# A scorer factory: fit(features of training rows, s of training rows) -> score function.
Fit = Callable[[np.ndarray, np.ndarray], Callable[[np.ndarray], np.ndarray]]


def identity_fit(features: np.ndarray, s: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The scorer of a raw signal: its (oriented) value, nothing learnt."""
    return lambda x: np.asarray(x, dtype=np.float64).reshape(len(x))


def logistic_probe_fit(c: float = 0.1) -> Fit:
    """Standardise on the training rows, then L2 logistic regression (scikit-learn, inverse
    strength `c`); the score is P(s = 1). A training set with one class scores its base rate."""

    def fit(features: np.ndarray, s: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        if len(np.unique(s)) < 2:
            rate = float(np.mean(s)) if len(s) else 0.5
            return lambda x: np.full(len(x), rate)
        from sklearn.linear_model import LogisticRegression  # import cost only when probing
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        model = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=2000))
        model.fit(np.asarray(features, dtype=np.float64), s)
        return lambda x: model.predict_proba(np.asarray(x, dtype=np.float64))[:, 1]

    return fit


@dataclass(frozen=True)
class CrossFit:
    """Cross-fitted scores and thresholds per row (NaN where the row could not be scored)."""

    score: np.ndarray  # float64 (rows,)
    threshold: np.ndarray  # float64 (rows,): the median training score of the row's fold
    fold: np.ndarray  # int64 (rows,)
    train_rows: tuple[np.ndarray, ...]  # per fold: the row indices its scorer was fitted on

    @property
    def says_right(self) -> np.ndarray:
        """Rows whose score reaches their fold's threshold (ties count as likely right)."""
        with np.errstate(invalid="ignore"):
            return self.score >= self.threshold


def crossfit(
    features: np.ndarray,
    s: np.ndarray,
    cluster: np.ndarray,
    *,
    fit: Fit = identity_fit,
    k: int = DEFAULT_FOLDS,
    seed: int = 0,
) -> CrossFit:
    """Score every row with a scorer fitted on the other folds (see the module docstring).

    `features` is (rows,) for a raw signal or (rows, d) for the probe; rows with a non-finite
    feature or unknown s are neither trained on nor scored (score NaN), unknown-s rows with
    finite features are still scored.
    """
    features = np.asarray(features, dtype=np.float64)
    flat = features.reshape(len(features), -1)
    s, cluster = np.asarray(s), np.asarray(cluster)
    usable = np.isfinite(flat).all(axis=1)
    folds = fold_of(cluster, k, seed)
    score = np.full(len(s), np.nan)
    threshold = np.full(len(s), np.nan)
    trained = []
    for f in range(k):
        train = np.flatnonzero((folds != f) & usable & (s >= 0))
        test = np.flatnonzero((folds == f) & usable)
        trained.append(train)
        if len(train) == 0 or len(test) == 0:
            continue
        scorer = fit(features[train], s[train])
        score[test] = scorer(features[test])
        threshold[test] = float(np.median(scorer(features[train])))
    return CrossFit(score, threshold, folds, tuple(trained))
