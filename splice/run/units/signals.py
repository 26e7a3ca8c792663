"""The model's own uncertainty signals, computed in the run and stored with the records.

Small summaries only, never logits (stats/grounding/join.py reads them back):

- **Token uncertainty of B's reasoning up to the cut.** The engine returns, per generated token,
  its log-probability and the entropy of the model's next-token distribution (temperature 1,
  whole vocabulary; `SamplingParams.token_stats`). Over B's tokens before the think-close
  (generated_ids[:boundary]) the B record stores `entropy_mean`, `entropy_max`, `nll_mean`
  (nats) and `tokens`; all None when the cut is at 0 tokens; no signals when B never closed.
- **Hidden state at B's cut.** The final-layer hidden state at the last position before the cut
  (the state whose logits chose the think-close), float16. One engine pass over prompt + reasoning
  with `return_hidden` computes it; the states of a B unit go to one side file
  `signals/<unit>.npy` (rows in the unit's problem order, closed B's only), written atomically
  before the unit's part file (splice/run/parts.py `store_unit`, for both schedules), and the B
  record stores `hidden = {"file", "row"}`.
- **Self-consistency.** K unaided samples per problem (condition `consistency`, `sample` 0..K-1)
  at temperature 1.0 and top-p 0.95, seed key (seed, problem, "consistency", k), in one batched
  `Engine.generate` per unit; each stores `answer_key`, the task's normalised answer
  (Task.answer_key). They are graded against the gold like NT but are never the competence label.
"""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path

import numpy as np

from nudgeability.engine import Completion, Engine, SamplingParams
from nudgeability.splice.rundir.layout import side_file
from nudgeability.splice.rundir.records import Record
from nudgeability.util.atomic import atomic_write_bytes

CONSISTENCY_TEMPERATURE = 1.0
CONSISTENCY_TOP_P = 0.95


def token_uncertainty(
    logprobs: list[float] | None, entropies: list[float] | None, boundary: int | None
) -> dict | None:
    """The B record's token-uncertainty summary over generated[:boundary]; None without a cut."""
    if boundary is None or logprobs is None or entropies is None:
        return None
    if boundary == 0:
        return {"entropy_mean": None, "entropy_max": None, "nll_mean": None, "tokens": 0}
    entropy = np.asarray(entropies[:boundary], dtype=np.float64)
    nll = -np.asarray(logprobs[:boundary], dtype=np.float64)
    return {
        "entropy_mean": float(entropy.mean()),
        "entropy_max": float(entropy.max()),
        "nll_mean": float(nll.mean()),
        "tokens": int(boundary),
    }


def hidden_reference(unit_name: str, row: int) -> dict:
    """What a B record stores to find its hidden state: the side file (relative to the run
    directory) and the row in it."""
    return {"file": side_file(unit_name), "row": int(row)}


def write_hidden(path: str | os.PathLike, states: np.ndarray) -> None:
    """Save a float16 (rows, hidden) array as .npy atomically (util/atomic.py)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(states, dtype=np.float16))
    atomic_write_bytes(path, buffer.getvalue())


def cut_prompts(records: list[Record], prompts: list[list[int]]) -> list[list[int]]:
    """The prompt + reasoning of each closed B, in unit order: the hidden-state pass's prompts."""
    return [
        p + r.generated_ids[: r.boundary]
        for r, p in zip(records, prompts)
        if r.boundary is not None
    ]


HIDDEN_PASS = SamplingParams(max_new_tokens=1, return_hidden=True)  # one pass per closed B


def attach_signals(
    records: list[Record], outs: list[Completion], states: list[Completion], unit_name: str
) -> tuple[list[Record], np.ndarray | None]:
    """B's records with their token uncertainty up to the cut and the reference of their hidden
    state at the cut, and those states as one float16 array for the unit's side file (rows: the
    closed B's in unit order; None when none closed); `states` are the hidden-state pass's
    results (`cut_prompts` order)."""
    closed = [j for j, record in enumerate(records) if record.boundary is not None]
    rows = {j: row for row, j in enumerate(closed)}
    hidden = None
    if closed:
        hidden = np.stack([state.hidden.float().numpy() for state in states]).astype(np.float16)
    out = []
    for j, (record, completion) in enumerate(zip(records, outs)):
        summary = token_uncertainty(completion.logprobs, completion.entropies, record.boundary)
        if summary is not None:
            summary["hidden"] = hidden_reference(unit_name, rows[j])
        out.append(dataclasses.replace(record, signals=summary))
    return out, hidden


def with_b_signals(
    engine: Engine,
    records: list[Record],
    prompts: list[list[int]],
    shared: list[int],
    outs: list[Completion],
    unit_name: str,
) -> tuple[list[Record], np.ndarray | None]:
    """`attach_signals` after one engine pass over the closed B's prompt + reasoning, each with
    its prompt's `shared` start (as B computed it)."""
    cut = cut_prompts(records, prompts)
    starts = [k for r, k in zip(records, shared) if r.boundary is not None]
    states = engine.generate(cut, HIDDEN_PASS, shared=starts) if cut else []
    return attach_signals(records, outs, states, unit_name)
