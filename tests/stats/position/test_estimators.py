"""S, WT, WTrand and L per position bin (stats/position/) against a brute force written here.

Random runs made with `nudge run --cuts` (helpers.synthetic_run.cut_records: small boundaries,
so that cuts fall on bin edges and tie) are read back as JSON objects, and everything is
recomputed here from the protocol's definitions (stats/README.md): the bin of each cut and the
cut a bin keeps with exact fractions, then loops over problems counting TOOL actions and flips.
The intervals are the project's bootstrap (estimators/intervals.py) on the table the brute force
builds; the paper's cut is the experiment's own summary.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from helpers.synthetic_run import CUT_PAIRS, cut_records, record_line

from nudgeability.splice.rundir.records import Record
from nudgeability.stats import ExperimentTable, RecordsError, summarize, table_from_records
from nudgeability.stats.estimators.intervals import bootstrap, bootstrap_clustered
from nudgeability.stats.position import (
    position_tables,
    summarize_positions,
)
from nudgeability.stats.table import ExperimentLabel

CODE = {"SELF": 0, "TOOL": 1, "OTHER": 2, "TRUNC": 3}
PARENT = {code: base for plus, minus, base in CUT_PAIRS.values() for code in (plus, minus)}
PARENT["neutral"] = "B"
N_BOOT = 300


def kept_cut(cuts, boundary, k, bins):
    """The protocol's rule with exact fractions: the cuts whose relative position lies in bin k
    ([0, 1/bins] for the first, (k/bins, (k+1)/bins] after), the one nearest the centre, the
    earlier on a tie."""
    low, high = Fraction(k, bins), Fraction(k + 1, bins)
    centre = (low + high) / 2
    inside = [at for at in cuts if low < Fraction(at, boundary) <= high or (k == 0 and at == 0)]
    if not inside:
        return None
    return min(inside, key=lambda at: (abs(Fraction(at, boundary) - centre), at))


def brute_force(lines, bins=5):
    """Per bin: the rows [(pid, seed)], s, base action and arm actions per pair, by hand."""
    records = [json.loads(line) for line in lines]
    order, nt, bases, arms, logprob = {}, {}, {}, {}, {}
    for r in records:
        pid, seed, code = r["problem_id"], r["seed"], r["condition"]
        order.setdefault(pid, len(order))
        if code == "NT":
            correct = r["grade"]["correct"]
            nt[(pid, seed)] = -1 if correct is None else int(correct)
        elif code in ("B", "oracle_B"):
            bases[(pid, seed, code)] = r
        elif r.get("at") is not None:
            arms[(pid, seed, code, r["at"])] = r["action"]["kind"]
            if r.get("likelihoods"):
                logprob[(pid, seed, code, r["at"])] = r["likelihoods"]["splice_logprob"]
    found = {}
    for k in range(bins):
        rows = {}
        for (pid, seed, base), record in bases.items():
            if record["boundary"] is None:
                continue
            cuts = {at for (p, s, c, at) in arms if (p, s) == (pid, seed) and PARENT[c] == base}
            at = kept_cut(cuts, record["boundary"], k, bins)
            if at is not None:
                rows.setdefault((pid, seed), {})[base] = (at, record["boundary"])
        keys = sorted(rows, key=lambda key: (order[key[0]], key[1]))
        found[k] = (keys, rows)
    return nt, bases, arms, logprob, order, found


def brute_pair(keys, rows, nt, bases, arms, pair):
    """(s, base, plus, minus) action lists of a pair over the bin's rows (-1: none)."""
    plus, minus, base = CUT_PAIRS[pair]
    out = {"s": [], "base": [], "plus": [], "minus": []}
    for pid, seed in keys:
        out["s"].append(nt.get((pid, seed), -1))
        b = bases.get((pid, seed, base))
        out["base"].append(CODE[b["action"]["kind"]] if b else -1)
        kept = rows[(pid, seed)].get(base)
        for side, code in (("plus", plus), ("minus", minus)):
            kind = None if kept is None else arms.get((pid, seed, code, kept[0]))
            out[side].append(-1 if kind is None else CODE[kind])
    return out


def brute_estimates(a):
    """S, WT, WTrand, L and the counts from the definitions, by loops."""
    n_s = tool_minus = tool_plus = 0
    for p, m in zip(a["plus"], a["minus"]):
        if p in (0, 1, 2) and m in (0, 1, 2):
            n_s += 1
            tool_minus += m == 1
            tool_plus += p == 1
    S = 100 * (tool_minus / n_s - tool_plus / n_s) if n_s else math.nan
    flips = well = 0
    expected = 0.0
    for side in ("plus", "minus"):
        for b in (0, 1):
            N = F = K = H = 0
            for s, base, arm in zip(a["s"], a["base"], a[side]):
                if s < 0 or base != b or arm not in (0, 1):
                    continue
                ideal = 0 if s == 1 else 1
                N += 1
                K += ideal != b
                if arm != base:
                    F += 1
                    H += arm == ideal
            flips, well = flips + F, well + H
            expected += F * K / N if N else 0.0
    WT = well / flips if flips else math.nan
    WTrand = expected / flips if flips else math.nan
    L = 100 * (WT - WTrand) if flips else math.nan
    return dict(S=S, n_S=n_s, WT=WT, WTrand=WTrand, L=L, F=flips, H=well)


def same(x, y):
    return (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, rel=1e-12, abs=1e-12)


def _table(a, keys, order):
    """The brute force's table of one pair, in the oracle pair's columns (any pair's base and
    arms would do: the bootstrap reads only those three arrays and s), one cluster per problem."""
    return ExperimentTable(
        s=np.array(a["s"], np.int8),
        base=np.full(len(keys), -1, np.int8),
        arms={
            "oracle_B": np.array(a["base"], np.int8),
            "oracle_conf": np.array(a["plus"], np.int8),
            "oracle_doubt": np.array(a["minus"], np.int8),
        },
        cluster=np.array([order[p] for p, _ in keys], np.int64),
        seed=np.array([s for _, s in keys], np.int64),
    )


@pytest.mark.parametrize("seeds", [(0,), (0, 1)])
def test_every_bin_and_pair_matches_the_brute_force(seeds):
    rng = np.random.default_rng(11 + len(seeds))
    lines = cut_records(rng, 70, pairs=("first", "second", "oracle"), seeds=seeds)
    records = [Record.from_json(line) for line in lines]
    summary = summarize_positions(position_tables(records, ExperimentLabel()), n_boot=N_BOOT)
    nt, bases, arms, _, order, found = brute_force(lines)
    points = {p.bin.index: p for p in summary.points}
    assert [p.bin.index for p in summary.points] == [k for k in range(5) if found[k][0]] + [5]
    assert summary.pairs == ("first", "second", "oracle") and summary.unplaced == 0
    checked = 0
    for k, (keys, rows) in found.items():
        if not keys:
            continue
        point = points[k]
        assert point.n_rows == len(keys)
        assert point.n_problems == len({p for p, _ in keys})
        positions = [at / boundary for row in rows.values() for at, boundary in row.values()]
        assert point.mean_position == pytest.approx(np.mean(positions), rel=1e-12)
        for pair in CUT_PAIRS:
            a = brute_pair(keys, rows, nt, bases, arms, pair)
            truth = brute_estimates(a)
            got = point.pairs[pair]
            for name, value in truth.items():
                assert same(getattr(got, name), value), (k, pair, name)
            # the interval: the project's bootstrap on the brute force's own table
            table = _table(a, keys, order)
            resample = bootstrap_clustered if len(seeds) > 1 else bootstrap
            boot = resample(table, N_BOOT, 0, pair="oracle")
            for name in ("S", "WT", "WTrand", "L"):
                interval, expected = getattr(got, f"{name}_ci"), getattr(boot, name)
                assert same(interval.low, expected.low) and same(interval.high, expected.high)
            checked += 1
    assert checked >= 12  # most bins hold every pair


def test_the_paper_cut_is_the_experiments_own_summary():
    rng = np.random.default_rng(5)
    lines = cut_records(rng, 60, pairs=("first", "oracle"))
    records = [Record.from_json(line) for line in lines]
    label = ExperimentLabel()
    summary = summarize_positions(position_tables(records, label), n_boot=N_BOOT, seed=4)
    paper = summary.points[-1]
    assert paper.bin.paper and paper.mean_position == 1.0
    own = summarize(table_from_records(records, label), n_boot=N_BOOT, seed=4)
    for pair in ("first", "oracle"):
        got, expected = paper.pairs[pair], own.pairs[pair]
        for name in ("S", "S_ci", "n_S", "WT", "WT_ci", "WTrand", "WTrand_ci", "L", "L_ci", "F"):
            assert repr(getattr(got, name)) == repr(getattr(expected, name)), (pair, name)


def test_the_likelihood_view_is_the_mean_splice_logprob_and_s_over_the_same_problems():
    rng = np.random.default_rng(9)
    lines = cut_records(rng, 80, pairs=("first",), likelihoods=True)
    records = [Record.from_json(line) for line in lines]
    summary = summarize_positions(position_tables(records, ExperimentLabel()), n_boot=50)
    nt, bases, arms, logprob, _, found = brute_force(lines)
    for point in summary.points[:-1]:
        keys, rows = found[point.bin.index]
        plus_lp, minus_lp, tool_plus, tool_minus = [], [], 0, 0
        for pid, seed in keys:
            kept = rows[(pid, seed)].get("B")
            if kept is None:
                continue
            at = kept[0]
            p, m = arms.get((pid, seed, "conf", at)), arms.get((pid, seed, "doubt", at))
            lp, lm = logprob.get((pid, seed, "conf", at)), logprob.get((pid, seed, "doubt", at))
            done = ("SELF", "TOOL", "OTHER")
            if p in done and m in done and lp is not None and lm is not None:
                plus_lp.append(lp)
                minus_lp.append(lm)
                tool_plus += p == "TOOL"
                tool_minus += m == "TOOL"
        view = point.likelihoods["first"]
        n = len(plus_lp)
        assert view.n == n > 0
        assert view.logprob_plus == pytest.approx(np.mean(plus_lp), rel=1e-12)
        assert view.logprob_minus == pytest.approx(np.mean(minus_lp), rel=1e-12)
        assert view.S == pytest.approx(100 * (tool_minus - tool_plus) / n, rel=1e-12)
    # the paper's cut: the arms without `at`
    paper = summary.points[-1].likelihoods["first"]
    assert paper.n > 0 and paper.logprob_plus < 0


def test_a_hand_worked_bin():
    """Three problems, boundary 10, worked by hand. p1 has cuts 3 and 4 in (0.2, 0.4]: 3 (0.3,
    the centre) is kept over 4 (0.1 away); and 7 in (0.6, 0.8]. p2 has cut 2 (0.2: bin [0, 0.2])
    and 4 (bin (0.2, 0.4]). p3 never closed its thinking: its arm at a cut has no base boundary
    and is unplaced."""

    def line(pid, code, kind, **fields):
        return record_line(pid, code, kind, **fields)

    lines = [
        line("p1", "NT", "SELF", graded=True, correct=True),  # s = 1
        line("p1", "B", "TOOL", boundary=10, cuts=[3, 4, 7]),
        line("p1", "conf", "SELF", at=3),
        line("p1", "doubt", "TOOL", at=3),
        line("p1", "conf", "TOOL", at=4),
        line("p1", "doubt", "TOOL", at=4),
        line("p1", "conf", "SELF", at=7),
        line("p1", "doubt", "SELF", at=7),
        line("p1", "conf", "SELF"),
        line("p1", "doubt", "TOOL"),
        line("p2", "NT", "SELF", graded=True, correct=False),  # s = 0
        line("p2", "B", "SELF", boundary=10, cuts=[2, 4]),
        line("p2", "conf", "SELF", at=2),
        line("p2", "doubt", "SELF", at=2),
        line("p2", "conf", "SELF", at=4),
        line("p2", "doubt", "TOOL", at=4),
        line("p2", "conf", "SELF"),
        line("p2", "doubt", "SELF"),
        line("p3", "NT", "SELF", graded=True, correct=False),
        line("p3", "B", "TRUNC", boundary=None),
        line("p3", "doubt", "TOOL", at=5),
    ]
    records = [Record.from_json(x) for x in lines]
    summary = summarize_positions(position_tables(records, ExperimentLabel()), n_boot=50)
    assert summary.unplaced == 1
    by_bin = {p.bin.index: p for p in summary.points}
    assert sorted(by_bin) == [0, 1, 3, 5]
    # (0.2, 0.4]: p1 at 3 (conf SELF, doubt TOOL; B TOOL, s = 1) and p2 at 4 (conf SELF, doubt
    # TOOL; B SELF, s = 0). S = 100 (2/2 − 0/2) = 100. Flips: p1's conf TOOL→SELF (ideal SELF:
    # well), p2's doubt SELF→TOOL (ideal TOOL: well): WT = 1. Strata, each N = 1, F = 1, K = 1:
    # (+, TOOL) p1, (−, SELF) p2; the others have no flip: WTrand = (1 + 1)/2 = 1, L = 0.
    first = by_bin[1].pairs["first"]
    assert (first.S, first.n_S, first.WT, first.WTrand, first.L, first.F, first.H) == (
        100.0,
        2,
        1.0,
        1.0,
        0.0,
        2,
        2,
    )
    assert by_bin[1].n_rows == 2 and by_bin[1].mean_position == pytest.approx(0.35)
    # [0, 0.2]: p2 alone at 2, both SELF: S = 0, no flip
    zero = by_bin[0].pairs["first"]
    assert (zero.S, zero.n_S, zero.F) == (0.0, 1, 0) and math.isnan(zero.WT)
    # (0.6, 0.8]: p1 alone at 7, both SELF under a TOOL base: two flips, both well-targeted;
    # strata (+, TOOL) and (−, TOOL) with N = F = K = 1: WTrand = 1, L = 0
    late = by_bin[3].pairs["first"]
    assert (late.S, late.WT, late.WTrand, late.L, late.F) == (0.0, 1.0, 1.0, 0.0, 2)


def test_a_cut_at_or_after_the_think_close_is_an_error_naming_the_record():
    lines = [
        record_line("p1", "NT", "SELF", graded=True, correct=True),
        record_line("p1", "B", "SELF", boundary=10, cuts=[10]),
        record_line("p1", "conf", "SELF"),
        record_line("p1", "doubt", "SELF"),
        record_line("p1", "doubt", "TOOL", at=10),
    ]
    records = [Record.from_json(x) for x in lines]
    with pytest.raises(RecordsError, match=r"\('p1', 'doubt', 0, '@000010'\).*boundary 10"):
        position_tables(records, ExperimentLabel())
