"""Synthetic run directories with every condition, in the runner's record schema.

`write_run(path, arrays, ...)` writes manifest.json (experiment, config, and, when given, the
data file), records.jsonl and timings.jsonl from int8 arrays: `s` (1 right, 0 wrong, -1
ungradeable), `base` and one array per arm code (-1 none, 0 SELF, 1 TOOL, 2 OTHER, 3 TRUNC), and
optionally `base_correct` (B's self-answer grade). Each record's text is readable (a reasoning,
the think-close marker, the action), so the report's browser has something to show.
`paper_arrays` draws arrays with every code at fixed frequencies.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from nudgeability.models.families.action import Action
from nudgeability.splice.experiment.conditions import CONDITIONS, REPORT_ORDER
from nudgeability.splice.rundir.records import GradeRecord, Record

ARMS = tuple(c for c in REPORT_ORDER if c not in ("NT", "B"))
KINDS = ("SELF", "TOOL", "OTHER", "TRUNC")
SENTENCE_OF = {c.code: c.sentence_id for c in CONDITIONS}
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


def _record(pid, task, condition, kind, *, seed, text, boundary=None, correct=None, graded=False):
    return Record(
        problem_id=pid,
        task=task,
        condition=condition,
        sentence_id=SENTENCE_OF.get(condition),
        seed=seed,
        prompt_tokens=12,
        prompt_sha256="0" * 64,
        prefix_tokens=None if condition in ("NT", "B", "oracle_B") else 7,
        boundary=boundary,
        generated_ids=[1, 2, 3],
        text=text,
        finish_reason="eos",
        action=Action(
            kind=kind,
            answer=f"answer of {pid}" if kind == "SELF" else None,
            tool_name="search" if kind == "TOOL" else None,
            arguments={"query": f"query of {pid}"} if kind == "TOOL" else None,
            reason=_REASONS.get(kind),
        ),
        grade=GradeRecord(em=float(bool(correct)), f1=None, correct=correct) if graded else None,
    ).to_json()


def records(arrays: dict, *, task: str = "musique", seed: int = 0, prefix: str = "p") -> list[str]:
    """The records.jsonl lines of `arrays` (module docstring)."""
    lines = []
    arms = [c for c in arrays if c in ARMS]
    for i in range(len(arrays["s"])):
        pid = f"{prefix}{i:04d}"
        s = int(arrays["s"][i])
        lines.append(
            _record(
                pid,
                task,
                "NT",
                "SELF",
                seed=seed,
                text=f"Unaided reasoning of {pid}.</think>answer",
                graded=True,
                correct=None if s < 0 else bool(s),
            )
        )
        b = int(arrays["base"][i])
        if b >= 0:
            correct = arrays.get("base_correct", np.full(len(arrays["s"]), -1))[i]
            lines.append(
                _record(
                    pid,
                    task,
                    "B",
                    KINDS[b],
                    seed=seed,
                    boundary=5,
                    text=f"With-tool reasoning of {pid} up to the cut.</think>then B's action",
                    graded=KINDS[b] == "SELF",
                    correct=None if correct < 0 else bool(correct),
                )
            )
        for code in arms:
            a = int(arrays[code][i])
            if a >= 0:
                lines.append(
                    _record(
                        pid,
                        task,
                        code,
                        KINDS[a],
                        seed=seed,
                        text=f"Continuation of {pid} under {code}.</think>then the arm's action",
                        boundary=5 if code == "oracle_B" else None,
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
    manifest_extra: dict | None = None,
) -> Path:
    """A run directory holding `lines` (module docstring)."""
    path.mkdir(parents=True, exist_ok=True)
    manifest = {
        "experiment": {"model": model, "task": task, "decoding": decoding, "seeds": list(seeds)},
        **(manifest_extra or {}),
    }
    (path / "manifest.json").write_text(json.dumps(manifest))
    (path / "records.jsonl").write_text("".join(line + "\n" for line in lines))
    (path / "timings.jsonl").write_text("")
    return path
