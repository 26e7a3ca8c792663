"""Recomputing the grounded-nudge table's counts from a run's raw records (end-to-end tests)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest


def check_grounding_counts(records: list[dict], stats: Path, problems: list[str], samples: int):
    """Every count of grounding.json / grounding.md recomputed from the raw records of one greedy
    experiment; returns (the summary, the retained problems I_D, s per problem)."""
    (summary,) = json.loads((stats / "grounding.json").read_text())
    K = samples
    by = {(r["problem_id"], r["condition"]): r for r in records if r["condition"] != "consistency"}
    s, base, conf, doubt, agree, entropy = {}, {}, {}, {}, {}, {}
    for pid in problems:
        nt = by[(pid, "NT")]
        known = nt["action"]["kind"] != "TRUNC" and nt["grade"]["correct"] is not None
        s[pid] = int(nt["grade"]["correct"]) if known else -1
        base[pid] = by[(pid, "B")]["action"]["kind"]
        conf[pid] = by.get((pid, "conf"), {}).get("action", {}).get("kind")
        doubt[pid] = by.get((pid, "doubt"), {}).get("action", {}).get("kind")
        keys = [
            r["signals"]["answer_key"]
            for r in records
            if r["problem_id"] == pid and r["condition"] == "consistency"
        ]
        answered = Counter(k for k in keys if k is not None)
        agree[pid] = (max(answered.values()) if answered else 0) / K
        b = by[(pid, "B")].get("signals") or {}
        entropy[pid] = b.get("entropy_mean")
    assert summary["n_problems"] == len(problems) and summary["samples"] == K
    signals = summary["signals"]
    known = [p for p in problems if s[p] >= 0]
    assert signals["consistency"]["n"] == len(known)
    # the AUROC of consistency, by the pairwise definition over the known problems
    right = [agree[p] for p in known if s[p] == 1]
    wrong = [agree[p] for p in known if s[p] == 0]
    pairs = [1.0 if a > b else 0.5 if a == b else 0.0 for a in right for b in wrong]
    if pairs:
        assert signals["consistency"]["auroc"] == pytest.approx(sum(pairs) / len(pairs))
    else:
        assert signals["consistency"]["auroc"] is None  # NaN in JSON: one class only
    assert signals["consistency"]["n_right"] == sum(s[p] == 1 for p in known)
    assert signals["entropy_mean"]["n"] == sum(entropy[p] is not None for p in known)
    assert "probe" in signals
    # I_D: s known, base, conf and doubt recorded, every signal defined
    retained = [
        p for p in known if conf[p] is not None and doubt[p] is not None and entropy[p] is not None
    ]
    assert summary["policies"]["B"]["n"] == len(retained)
    ideal = {p: "SELF" if s[p] == 1 else "TOOL" for p in problems}
    for name, actions in (("B", base), ("conf", conf), ("doubt", doubt)):
        hits = sum(actions[p] == ideal[p] for p in retained)
        want = hits / len(retained) if retained else None
        assert summary["policies"][name]["accuracy"] == (
            pytest.approx(want) if want is not None else None
        )
    for arm in summary["grounded"].values():
        assert arm["n"] == len(retained)
        if not retained:
            continue
        if retained:  # the lift is grounded minus q conf - (1 - q) doubt, as hand-computed
            q = arm["share_conf"]
            da = {n: summary["policies"][n]["accuracy"] for n in ("conf", "doubt")}
            assert arm["sham"] == pytest.approx(q * da["conf"] + (1 - q) * da["doubt"])
            assert arm["lift"] == pytest.approx(100 * (arm["accuracy"] - arm["sham"]))
        # q and the accuracy are shares of the n retained rows
        assert arm["share_conf"] * len(retained) == pytest.approx(
            round(arm["share_conf"] * len(retained))
        )
        assert arm["accuracy"] * len(retained) == pytest.approx(
            round(arm["accuracy"] * len(retained))
        )
    table = (stats / "grounding.md").read_text()
    assert "| consistency |" in table and "grounded: entropy_mean" in table
    assert f"I_D = {len(retained)} rows" in table
    return summary, retained, s
