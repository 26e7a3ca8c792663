"""The paper's tables by number (stats/report/tables/paper.py): each recomputed here by brute force
from the records the test writes, with loops of its own, never the code under test.

Table 4's per-seed accuracy, Table 5's repeated-label flip share and WT range, Table 6's delegation
rates, Table 7's pooled totals, Table 8's WT and L, Table 9's rho, the sealed - open difference
with its interval, and the paper's cross-experiment counts.
"""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from helpers import synthetic_run as synthetic

from nudgeability.stats.report.pipeline import StatsOptions, run_stats
from nudgeability.stats.resampling.bootstrap import Resamples

N_BOOT = 400


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Two greedy experiments with every condition and one sampled experiment with 3 seeds,
    summarised once; returns the stats directory and each run's records as dicts."""
    tmp = tmp_path_factory.mktemp("paper")
    rng = np.random.default_rng(11)
    dirs = []
    for task, n in (("musique", 90), ("strategyqa", 70)):
        lines = synthetic.records(synthetic.paper_arrays(rng, n), task=task)
        dirs.append(synthetic.write_run(tmp / task, lines, task=task))
    lines = []
    for seed in (0, 1, 2):
        arrays = synthetic.paper_arrays(rng, 60)
        lines += synthetic.records(arrays, seed=seed, prefix="q")
    dirs.append(synthetic.write_run(tmp / "sampled", lines, decoding="sampled", seeds=(0, 1, 2)))
    out = tmp / "stats"
    run_stats(StatsOptions(dirs, out=out, n_boot=N_BOOT, seed=3))
    return out, {
        d.name: [json.loads(line) for line in (d / "records.jsonl").read_text().splitlines()]
        for d in dirs
    }


def _csv(out, name):
    return list(csv.DictReader(io.StringIO((out / f"{name}.csv").read_text())))


def _by_problem(records, seed=None):
    """{(problem, seed): {condition: record}}."""
    found = {}
    for r in records:
        if seed is None or r["seed"] == seed:
            found.setdefault((r["problem_id"], r["seed"]), {})[r["condition"]] = r
    return found


def _kind(conditions, code):
    record = conditions.get(code)
    return None if record is None else record["action"]["kind"]


def _label(conditions):
    grade = conditions["NT"]["grade"]
    return None if grade is None or grade["correct"] is None else int(grade["correct"])


def test_table6_rates_are_tool_over_completed(written):
    out, records = written
    row = next(r for r in _csv(out, "table6") if r["task"] == "strategyqa" and r["model"] == "m")
    for code in ("B", "empty", "doubt", "sealed_conf", "oracle_B"):
        kinds = [r["action"]["kind"] for r in records["strategyqa"] if r["condition"] == code]
        completed = [k for k in kinds if k in ("SELF", "TOOL", "OTHER")]
        assert float(row[code]) == pytest.approx(100 * kinds.count("TOOL") / len(completed))
        assert int(row[f"{code}_n"]) == len(completed)
        assert float(row[f"{code}_low"]) <= float(row[code]) <= float(row[f"{code}_high"])


def test_table7_pools_numerators_and_denominators(written):
    out, records = written
    num = den = 0
    for task in ("musique", "strategyqa"):
        for conditions in _by_problem(records[task]).values():
            b = conditions.get("B")
            s = _label(conditions)
            if b is None or b["action"]["kind"] != "SELF" or s != 1 or b["grade"] is None:
                continue
            if b["grade"]["correct"] is None:
                continue
            den += 1
            num += b["grade"]["correct"] is False
    for row in _csv(out, "table7"):
        if row["model"] != "pooled" and row["dself"]:  # the interval's point is the same rate
            assert float(row["dself_ci"]) == pytest.approx(float(row["dself"]))
    pooled = next(
        r for r in _csv(out, "table7") if r["model"] == "pooled" and "greedy" in r["cohort"]
    )
    assert (int(pooled["dself_num"]), int(pooled["dself_den"])) == (num, den)


def _targeting(rows, plus, minus):
    """WT (%) and L (pp) by brute force: flip events per polarity, the random reference per
    (polarity, base) stratum."""
    strata = {}
    for conditions, s in rows:
        base = _kind(conditions, "B")
        if s is None or base not in ("SELF", "TOOL"):
            continue
        ideal = "SELF" if s == 1 else "TOOL"
        for polarity, code in (("+", plus), ("-", minus)):
            arm = _kind(conditions, code)
            if arm not in ("SELF", "TOOL"):
                continue
            cell = strata.setdefault((polarity, base), [0, 0, 0, 0])  # N F K H
            cell[0] += 1
            cell[2] += base != ideal
            if arm != base:
                cell[1] += 1
                cell[3] += arm == ideal
    flips = sum(c[1] for c in strata.values())
    wt = sum(c[3] for c in strata.values()) / flips
    rand = sum(c[1] * c[2] / c[0] for c in strata.values()) / flips
    return 100 * wt, 100 * (wt - rand)


def test_table8_wt_and_l_of_a_voice(written):
    out, records = written
    rows = [(c, _label(c)) for c in _by_problem(records["musique"]).values()]
    wt, lift = _targeting(rows, "conf_expert", "doubt_expert")
    row = next(
        r
        for r in _csv(out, "table8")
        if r["task"] == "musique" and r["decoding"] == "greedy" and r["voice"] == "expert"
    )
    assert float(row["WT"]) == pytest.approx(wt)
    assert float(row["L"]) == pytest.approx(lift)


def _swing_columns(conditions, plus, minus):
    a, b = _kind(conditions, plus), _kind(conditions, minus)
    both = a in ("SELF", "TOOL", "OTHER") and b in ("SELF", "TOOL", "OTHER")
    return [int(both), int(both and b == "TOOL"), int(both and a == "TOOL")]


def test_sealed_minus_open_and_its_interval(written):
    out, records = written
    problems = list(_by_problem(records["musique"]).values())
    units = np.array(
        [
            _swing_columns(c, "sealed_conf", "sealed_doubt") + _swing_columns(c, "conf", "doubt")
            for c in problems
        ]
    )

    def delta(sums):
        sealed = 100 * (sums[..., 1] - sums[..., 2]) / sums[..., 0]
        return sealed - 100 * (sums[..., 4] - sums[..., 5]) / sums[..., 3]

    row = next(
        r for r in _csv(out, "sealed") if r["task"] == "musique" and r["decoding"] == "greedy"
    )
    assert float(row["delta"]) == pytest.approx(delta(units.sum(axis=0)))
    # the interval: the same resampled problems (the stream every bootstrap of the package draws),
    # each replicate's difference computed here from the weighted unit rows
    counts = Resamples.draw(np.arange(len(problems)), N_BOOT, 3).counts
    replicates = delta(counts.astype(np.int64) @ units)
    low, high = np.percentile(replicates[np.isfinite(replicates)], [2.5, 97.5])
    assert (float(row["delta_low"]), float(row["delta_high"])) == pytest.approx((low, high))


def test_table4_per_seed_accuracy_and_table5_repeated_labels(written):
    out, records = written
    sampled = records["sampled"]
    labels = {}
    for r in sampled:
        if r["condition"] == "NT":
            correct = r["grade"]["correct"]
            labels.setdefault(r["problem_id"], {})[r["seed"]] = (
                None if correct is None else int(correct)
            )
    for row in _csv(out, "table4"):
        seed = int(row["seed"])
        known = [v[seed] for v in labels.values() if v.get(seed) is not None]
        assert float(row["unaided_accuracy"]) == pytest.approx(100 * sum(known) / len(known))
    several = [[x for x in v.values() if x is not None] for v in labels.values()]
    several = [v for v in several if len(v) >= 2]
    flipped = sum(len(set(v)) > 1 for v in several)
    (row,) = _csv(out, "table5")
    assert (int(row["label_flipped"]), int(row["label_problems"])) == (flipped, len(several))
    assert float(row["label_flip_share"]) == pytest.approx(100 * flipped / len(several))
    # WT under each draw: every row's label is its problem's label under seed k
    by_row = _by_problem(sampled)
    wts = []
    for k in (0, 1, 2):
        rows = [(c, labels[pid].get(k)) for (pid, _), c in by_row.items()]
        wts.append(_targeting(rows, "conf", "doubt")[0])
    assert (float(row["WT_labels_min"]), float(row["WT_labels_max"])) == pytest.approx(
        (min(wts), max(wts))
    )


def test_table9_rho(written):
    out, records = written
    kinds = [r["action"]["kind"] for r in records["musique"] if r["condition"] == "oracle_B"]
    completed = [k for k in kinds if k in ("SELF", "TOOL", "OTHER")]
    row = next(
        r for r in _csv(out, "table9") if r["task"] == "musique" and r["decoding"] == "greedy"
    )
    assert float(row["rho"]) == pytest.approx(100 * kinds.count("SELF") / len(completed))


def test_the_cross_experiment_counts(written):
    out, records = written
    positive = 0
    for task in ("musique", "strategyqa"):
        wrong, right = [0, 0], [0, 0]
        for conditions in _by_problem(records[task]).values():
            s, b = _label(conditions), _kind(conditions, "B")
            if s is None or b not in ("SELF", "TOOL", "OTHER"):
                continue
            cell = right if s == 1 else wrong
            cell[0] += b == "TOOL"
            cell[1] += 1
        positive += wrong[0] / wrong[1] > right[0] / right[1]
    found = {(r["cohort"], r["name"]): r for r in _csv(out, "summaries")}
    gamma = found[("open-weight, greedy", "gamma_positive")]
    assert (float(gamma["k"]), int(gamma["n"])) == (positive, 2)
    document = json.loads((out / "stats.json").read_text())
    assert set(document["claims"]) == {"open-weight, greedy", "open-weight, sampled"}
    for name in (
        "table1",
        "table4",
        "table5",
        "table6",
        "table7",
        "table8",
        "table9",
        "sealed",
        "summaries",
    ):
        for ext in ("md", "csv", "tex"):
            assert (out / f"{name}.{ext}").is_file()
