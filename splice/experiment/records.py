"""The record schema: one JSONL line per (problem, condition, seed).

This is the contract between the runner (which writes records) and `nudgeability.stats` (which
reads them). Records carry no clock: timings go to a separate file, so that two runs of the same
config give byte-identical record files.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

# The committed action read after the final think-close marker: the family parser's own dataclass
# (kind, answer, tool_name, arguments, reason, narration), stored as it is. `ActionRecord` is its name here.
from nudgeability.models.families.action import ACTION_KINDS, Action

# The grade is the task's (splice/tasks/problem.py), stored as it is, like the action.
from nudgeability.splice.tasks.problem import GradeRecord

ActionRecord = Action
OPTIONAL_FIELDS = ("sample", "signals")  # written only when set
# How faithfully a backend continued the prompt (a record's `continuation`), most faithful first:
# token ids in and out (the engine, a server given ids) | the rendered text | a chat turn
CONTINUATION_LEVELS = ("token", "text", "chat")
__all__ = ["ACTION_KINDS", "Action", "ActionRecord", "GradeRecord", "Record"]


@dataclass(frozen=True)
class Record:
    problem_id: str
    task: str  # "musique" | "strategyqa"
    condition: str  # a code from nudgeability.splice.experiment.conditions
    sentence_id: (
        str | None
    )  # the inserted sentence's id in the sentences file; None for NT, B, empty
    seed: int  # decoding seed (0 for greedy runs)
    prompt_tokens: int  # token count of the rendered prompt (unaided or with-tool)
    prompt_sha256: str  # sha256 of the prompt ids as little-endian int32 bytes
    prefix_tokens: (
        int | None
    )  # arms: tokens of the B reasoning prefix r_i (after the prompt); else None
    boundary: (
        int | None
    )  # B / oracle_B: index in generated_ids of the first think-close; None if never closed
    generated_ids: list[int]
    text: str  # decoded generated_ids, special tokens kept
    finish_reason: str  # "eos" | "stop_token" | "stop_string" | "length"
    action: ActionRecord
    grade: GradeRecord | None  # NT always; B / oracle_B when the action is SELF; else None
    # how faithfully the backend continued the prompt (CONTINUATION_LEVELS):
    # written only when it is not token-exact, so the records of a local run keep their bytes
    continuation: str = "token"
    # The self-consistency samples (condition `consistency`): which of the K samples, 0..K-1.
    sample: int | None = None
    # The uncertainty signals (splice/run/signals.py): on B, its token uncertainty up to the cut and
    # the reference of its hidden state; on a consistency sample, its answer key. None elsewhere.
    signals: dict | None = None

    def to_json(self) -> str:
        """One line of JSON with sorted keys: the byte-exact form written to records.jsonl.

        `continuation` is left out when token-exact, and `sample` and `signals` when None, so
        the records of local runs without signals keep the bytes they always had."""
        data = asdict(self)
        if data["continuation"] == "token":
            del data["continuation"]
        for key in OPTIONAL_FIELDS:
            if data[key] is None:
                del data[key]
        return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))

    @staticmethod
    def from_dict(data: dict) -> Record:
        fields = dict(data)
        fields["action"] = ActionRecord(**fields["action"])
        fields["grade"] = (
            GradeRecord(**fields["grade"]) if fields.get("grade") is not None else None
        )
        return Record(**fields)


def record_sha256(line: str) -> str:
    """sha256 of a record's JSON line (UTF-8, without its newline): how a resolution names its
    source record exactly."""
    return hashlib.sha256(line.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ResolutionRecord:
    """One line of resolutions.jsonl: the resolution of one TOOL record (`nudge run --resolve`).

    (problem_id, condition, seed) is the key of the resolved record in records.jsonl and
    `source_sha256` the hash of its line. `executed` says whether the tool ran; `unresolved` why
    there is no continuation (a call whose arguments do not fit the declaration, or a prompt too
    long for the model), else None. The continuation's prompt is the record's context cut after
    the call, plus the tool-result turn and the next turn's header.
    """

    problem_id: str
    task: str
    condition: str
    seed: int
    source_sha256: str
    tool_name: str
    arguments: dict | None
    executed: bool
    result_sha256: str | None  # sha256 of the tool's result text (UTF-8)
    unresolved: str | None
    prompt_tokens: int | None  # the whole resolution prompt
    prompt_sha256: str | None  # sha256 of its ids as little-endian int32 bytes
    generated_ids: list[int]
    text: str
    finish_reason: str | None
    action: ActionRecord | None  # the turn's action; TOOL = a second call, not executed
    grade: GradeRecord | None  # SELF only

    def to_json(self) -> str:
        """One line of JSON with sorted keys, as Record.to_json."""
        return json.dumps(asdict(self), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
