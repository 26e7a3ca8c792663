"""Synthetic run directories with every condition, in the runner's record schema.

`write_run(path, arrays, ...)` writes manifest.json (experiment, config, and, when given, the
data file), records.jsonl and timings.jsonl from int8 arrays: `s` (1 right, 0 wrong, -1
ungradeable), `base` and one array per arm code (-1 none, 0 SELF, 1 TOOL, 2 OTHER, 3 TRUNC), and
optionally `base_correct` (B's self-answer grade). Each record's text is readable (a reasoning,
the think-close marker, the action), so the report's browser has something to show.
`paper_arrays` draws arrays with every code at fixed frequencies. `record_line` builds one record
line; the statistics tests use it and `records(..., readable=False)` (tests/stats/conftest.py).
This is the one builder of fake runs in the tests.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from nudgeability.models.families.action import Action
from nudgeability.splice.experiment.conditions import CONDITIONS, REPORT_ORDER
from nudgeability.splice.rundir.records import Likelihoods, Record
from nudgeability.splice.tasks.problem import GradeRecord

ARMS = tuple(c for c in REPORT_ORDER if c not in ("NT", "B"))
KINDS = ("SELF", "TOOL", "OTHER", "TRUNC")
SENTENCE_OF = {c.code: c.sentence_id for c in CONDITIONS}
# A reason the runner would give these kinds (the join reads only the kind).
_REASONS = {"OTHER": "empty_commitment", "TRUNC": "budget_in_thinking"}


def paper_arrays(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """s, base, base_correct and every arm, with every code present."""
    codes = np.array([-1, 0, 1, 2, 3], np.int8)
    out = {
        "s": rng.choice(np.array([-1, 0, 1], np.int8), size=n, p=[0.1, 0.4, 0.5]),
        "base": rng.choice(codes[1:], size=n, p=[0.5, 0.4, 0.05, 0.05]),
        "base_correct": rng.choice(np.array([-1, 0, 1], np.int8), size=n),
    }
    for code in ARMS:
        out[code] = rng.choice(codes, size=n, p=[0.05, 0.45, 0.4, 0.05, 0.05])
    return out


def record_line(
    problem_id: str,
    condition: str,
    kind: str,
    *,
    task: str = "musique",
    seed: int = 0,
    correct: bool | None = None,
    graded: bool = False,
    boundary: int | None = None,
    text: str = "...",
    readable: bool = False,
    at: int | None = None,
    cuts: list[int] | None = None,
    splice_logprob: float | None = None,
    openers: tuple[float, float] | None = None,
) -> str:
    """One records.jsonl line in the runner's schema (built with Record). `boundary` is kept on
    B and oracle_B only, as the runner writes it. `readable`: the form the report's browser
    shows (the condition's sentence id, a named answer, a search call with its query, no F1);
    otherwise the bare form the estimators read (answer "x", F1 = EM). A run made with
    `nudge run --cuts`: `at` on an arm at an extra cut, `cuts` on its base; `splice_logprob`:
    the arm's likelihoods (`--likelihoods`), one splice token of that log-probability, and
    `openers` = (P(TOOL), P(answer)) a sealed arm's opener probabilities beside them."""
    tool = readable and kind == "TOOL"
    is_base = condition in ("B", "oracle_B")
    answer = (f"answer of {problem_id}" if readable else "x") if kind == "SELF" else None
    return Record(
        problem_id=problem_id,
        task=task,
        condition=condition,
        sentence_id=SENTENCE_OF.get(condition) if readable else None,
        seed=seed,
        prompt_tokens=12,
        prompt_sha256="0" * 64,
        prefix_tokens=None if is_base or condition == "NT" else 7,
        boundary=boundary if is_base else None,
        generated_ids=[1, 2, 3],
        text=text,
        finish_reason="eos",
        action=Action(
            kind=kind,
            answer=answer,
            tool_name="search" if tool else None,
            arguments={"query": f"query of {problem_id}"} if tool else None,
            reason=_REASONS.get(kind),
        ),
        grade=GradeRecord(
            em=float(bool(correct)), f1=None if readable else float(bool(correct)), correct=correct
        )
        if graded
        else None,
        at=at,
        cuts=cuts if is_base else None,
        likelihoods=None
        if splice_logprob is None
        else Likelihoods(
            splice_logprobs=[splice_logprob],
            splice_logprob=splice_logprob,
            tool_opener_logprob=None if openers is None else math.log(openers[0]),
            answer_opener_logprob=None if openers is None else math.log(openers[1]),
        ),
    ).to_json()


def records(
    arrays: dict,
    *,
    task: str = "musique",
    seed: int = 0,
    prefix: str = "p",
    base_correct: np.ndarray | None = None,
    readable: bool = True,
    cut: int = 5,
) -> list[str]:
    """The records.jsonl lines of `arrays` (module docstring): NT graded by `s` (-1: a null
    grade), B and every arm present where their code is not -1. B's self-answer is graded by
    `base_correct` (or `arrays["base_correct"]`); B and oracle_B cut at token `cut`, except a
    TRUNC B with no arm at all, whose thinking never closed (boundary null). `readable`: texts the
    report's browser can show, else "..." (`record_line`)."""
    lines = []
    n = len(arrays["s"])
    if base_correct is None:
        base_correct = arrays.get("base_correct", np.full(n, -1))
    arms = [c for c in arrays if c not in ("s", "base", "base_correct")]

    def line(pid, condition, kind, text, **fields):
        text = text if readable else "..."
        return record_line(
            pid, condition, kind, task=task, seed=seed, text=text, readable=readable, **fields
        )

    for i in range(n):
        pid = f"{prefix}{i:04d}"
        s = int(arrays["s"][i])
        reasoning = f"Unaided reasoning of {pid}.</think>answer"
        lines.append(
            line(pid, "NT", "SELF", reasoning, graded=True, correct=None if s < 0 else bool(s))
        )
        b = int(arrays["base"][i])
        if b >= 0:
            unclosed = KINDS[b] == "TRUNC" and all(arrays[c][i] < 0 for c in arms)
            correct = int(base_correct[i])
            lines.append(
                line(
                    pid,
                    "B",
                    KINDS[b],
                    f"With-tool reasoning of {pid} up to the cut.</think>then B's action",
                    boundary=None if unclosed else cut,
                    graded=KINDS[b] == "SELF",
                    correct=None if correct < 0 else bool(correct),
                )
            )
        for code in arms:
            a = int(arrays[code][i])
            if a >= 0:
                lines.append(
                    line(
                        pid,
                        code,
                        KINDS[a],
                        f"Continuation of {pid} under {code}.</think>then the arm's action",
                        boundary=cut,
                        graded=code == "oracle_B" and KINDS[a] == "SELF",
                        correct=False,
                    )
                )
    return lines


def write_run(
    path: Path,
    lines: list[str],
    *,
    model: str = "m",
    task: str = "musique",
    decoding: str = "greedy",
    seeds: tuple[int, ...] = (0,),
    conditions: list[str] | None = None,
    manifest_extra: dict | None = None,
) -> Path:
    """A run directory holding `lines` (module docstring); `conditions`, when given, are the
    config's conditions in the manifest."""
    path.mkdir(parents=True, exist_ok=True)
    manifest = {
        "experiment": {"model": model, "task": task, "decoding": decoding, "seeds": list(seeds)},
        **({"config": {"conditions": conditions}} if conditions is not None else {}),
        **(manifest_extra or {}),
    }
    (path / "manifest.json").write_text(json.dumps(manifest))
    (path / "records.jsonl").write_text("".join(line + "\n" for line in lines))
    (path / "timings.jsonl").write_text("")
    return path


# The pairs a cuts run may fork, by name: (confidence arm, doubt arm, base), as conditions.py.
CUT_PAIRS = {
    "first": ("conf", "doubt", "B"),
    "second": ("conf_second", "doubt_second", "B"),
    "oracle": ("oracle_conf", "oracle_doubt", "oracle_B"),
}


def cut_records(
    rng: np.random.Generator,
    n: int,
    *,
    pairs: tuple[str, ...] = ("first",),
    seeds: tuple[int, ...] = (0,),
    likelihoods: bool = False,
    extra: tuple[str, ...] = ("neutral",),
    task: str = "musique",
    max_boundary: int = 40,
) -> list[str]:
    """The records.jsonl lines of a run made with `nudge run --cuts`, drawn at random: per
    problem and seed NT (graded at random, sometimes ungradeable), each base of `pairs` (B, and
    oracle_B for the oracle pair) with a small random boundary (so that cuts fall on bin edges
    and tie) and 0 to 4 random cuts before it, or now and then never closed; every arm of
    `pairs` and `extra` (B's arms) at the paper's cut and at each cut, its action drawn with
    every kind, now and then missing; `likelihoods`: most arms carry a random splice
    log-probability."""
    kinds = np.array(KINDS)
    bases = {CUT_PAIRS[name][2] for name in pairs}
    arms_of = {
        base: [code for name in pairs for code in CUT_PAIRS[name][:2] if CUT_PAIRS[name][2] == base]
        for base in bases
    }
    arms_of.setdefault("B", [])
    arms_of["B"] += list(extra)
    lines = []

    def arm_kind() -> str | None:
        return None if rng.random() < 0.06 else str(rng.choice(kinds, p=[0.4, 0.4, 0.1, 0.1]))

    def logprob() -> float | None:
        return float(-rng.gamma(2.0, 3.0)) if likelihoods and rng.random() < 0.9 else None

    for seed in seeds:
        for i in range(n):
            pid = f"p{i:04d}"
            s = int(rng.choice([-1, 0, 1], p=[0.1, 0.4, 0.5]))
            lines.append(
                record_line(
                    pid,
                    "NT",
                    "SELF",
                    task=task,
                    seed=seed,
                    graded=True,
                    correct=None if s < 0 else bool(s),
                )
            )
            for base in sorted(bases | {"B"}):
                kind = str(rng.choice(kinds, p=[0.45, 0.45, 0.05, 0.05]))
                closed = rng.random() > 0.05
                boundary = int(rng.integers(2, max_boundary + 1)) if closed else None
                cuts = (
                    sorted(
                        int(a)
                        for a in rng.choice(
                            np.arange(1, boundary),
                            size=min(int(rng.integers(0, 5)), boundary - 1),
                            replace=False,
                        )
                    )
                    if closed
                    else None
                )
                lines.append(
                    record_line(
                        pid,
                        base,
                        kind,
                        task=task,
                        seed=seed,
                        boundary=boundary,
                        cuts=cuts,
                        graded=kind == "SELF",
                        correct=bool(rng.random() < 0.5),
                    )
                )
                if not closed:
                    continue
                for at in (None, *cuts):
                    for code in arms_of[base]:
                        arm = arm_kind()
                        if arm is not None:
                            lines.append(
                                record_line(
                                    pid,
                                    code,
                                    arm,
                                    task=task,
                                    seed=seed,
                                    at=at,
                                    splice_logprob=logprob(),
                                )
                            )
    return lines
