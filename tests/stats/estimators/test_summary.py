"""summarize() gathers the estimators' own results, intervals and retained counts under the paper's names."""

from __future__ import annotations

import numpy as np
import pytest

from nudgeability.stats import (
    ExperimentLabel,
    ExperimentTable,
    ProfileRule,
    TableError,
    bootstrap,
    bootstrap_clustered,
    gamma,
    mcnemar,
    profile_label,
    sensitivity,
    summarize,
    targeting,
)


def _table(planted, rng, n, seeds=1):
    draws = [planted.sample(rng, n) for _ in range(seeds)]
    extra = [planted.sample(rng, n) for _ in range(seeds)]
    cat = lambda key, source=None: np.concatenate([(source or draws)[k][key] for k in range(seeds)])  # noqa: E731
    return ExperimentTable(
        s=cat("s"),
        base=cat("base"),
        arms={
            "conf": cat("conf"),
            "doubt": cat("doubt"),
            "sealed_conf": cat("conf", extra),
            "sealed_doubt": cat("doubt", extra),
            "oracle_B": cat("base", extra),
        },
        correct={"B": rng.integers(-1, 2, n * seeds)},
        cluster=np.tile(np.arange(n), seeds),
        seed=np.repeat(np.arange(seeds), n),
        label=ExperimentLabel("m", "musique", "greedy" if seeds == 1 else "sampled"),
    )


def test_summary_equals_the_estimators_applied_one_by_one(planted):
    table = _table(planted, np.random.default_rng(21), 500)
    result = summarize(table, n_boot=1000, seed=2)
    conf, doubt = table.arms["conf"], table.arms["doubt"]
    sens, targ = sensitivity(conf, doubt), targeting(table.s, table.base, conf, doubt)
    assert (result.S, result.n_S, result.WT, result.WTrand, result.L) == (
        sens.S,
        sens.n_S,
        targ.WT,
        targ.WTrand,
        targ.L,
    )
    assert (result.n_WT, result.F, result.H) == (targ.n_WT, targ.F, targ.H)
    boot = bootstrap(table, n_boot=1000, seed=2)
    assert (result.S_ci, result.WT_ci, result.WTrand_ci, result.L_ci) == (
        boot.S,
        boot.WT,
        boot.WTrand,
        boot.L,
    )
    assert result.primary.mcnemar == mcnemar(conf, doubt)
    assert result.gamma == gamma(table.s, table.base)
    assert result.profile_rule == ProfileRule()  # the documented defaults, 15 and 5 pp
    assert result.profile == profile_label(result.S, result.S_ci, result.L, result.L_ci)
    assert set(result.pairs) == {"first", "sealed"}  # oracle needs oracle_conf and oracle_doubt too
    assert (
        result.pairs["sealed"].S
        == sensitivity(table.arms["sealed_conf"], table.arms["sealed_doubt"]).S
    )
    assert result.oracle is not None and result.self_answers is not None
    assert set(result.delegation) == {
        "B",
        "conf",
        "doubt",
        "sealed_conf",
        "sealed_doubt",
        "oracle_B",
    }
    assert not result.clustered and result.per_seed == {}


def test_sampled_tables_are_pooled_bootstrapped_by_problem_and_summarised_per_seed(planted):
    table = _table(planted, np.random.default_rng(22), 120, seeds=3)
    result = summarize(table, n_boot=1000, seed=0)
    assert (
        result.clustered
        and result.n_problems == 120
        and result.n_rows == 360
        and result.seeds == (0, 1, 2)
    )
    assert (
        result.S == sensitivity(table.arms["conf"], table.arms["doubt"]).S
    )  # pooled over all rows
    assert result.S_ci == bootstrap_clustered(table, n_boot=1000, seed=0).S
    for seed in (0, 1, 2):
        rows = table.for_seed(seed)
        assert result.per_seed[seed].S == sensitivity(rows.arms["conf"], rows.arms["doubt"]).S
        assert result.per_seed[seed].L_ci == bootstrap(rows, n_boot=1000, seed=0).L


def test_summarize_without_the_primary_pair_names_the_experiment():
    table = ExperimentTable(
        s=[1], base=[0], arms={"conf": [0]}, label=ExperimentLabel("qwen", "musique", "greedy")
    )
    with pytest.raises(TableError, match="experiment qwen/musique/greedy: no conf and doubt arms"):
        summarize(table)
