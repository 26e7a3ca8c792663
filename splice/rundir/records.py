"""The record schema, its one writer and its one reader: records.jsonl and resolutions.jsonl.

A `Record` is one line of records.jsonl per (problem, condition, seed), and for the
self-consistency samples per sample; a `ResolutionRecord` one line of resolutions.jsonl per TOOL
record (`nudge run --resolve`). The runner builds them (splice/run/units/), writes
them with `to_json` and reads its own parts back with `Record.from_json`; the stats and the
report read run directories through `read_records` / `read_resolutions`, which check each line
and hand back typed objects. Records carry no clock (timings go to a separate file), so that two
runs of one config give byte-identical record files. What each field means: README.md,
"The record".

The committed action is the family parser's own dataclass, `models.families.action.Action`, and
the grade the task's `GradeRecord` (splice/tasks/problem.py), each stored as it is: the parser and
the task (lower layers) build them, and the records only hold them.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import NamedTuple

from nudgeability.models.families.action import ACTION_KINDS, Action
from nudgeability.splice.rundir.layout import RECORDS
from nudgeability.splice.tasks.problem import GradeRecord
from nudgeability.util.json_lines import read_json_lines

# How faithfully a backend continued a prompt, most faithful first: ids in and out (the engine, a
# completions server given ids), text in and out, or a chat turn continued (backends/README.md).
CONTINUATION_LEVELS = ("token", "text", "chat")
OPTIONAL_FIELDS = ("sample", "signals", "cut", "likelihoods", "at", "cuts")  # written only when set


def least_faithful(levels: Iterable[str]) -> str:
    """The lowest level among `levels` ('token' when empty): what a report must warn about (a
    server that returned no ids for some requests makes a token-mode run text-level)."""
    found = [CONTINUATION_LEVELS.index(level) for level in levels]
    return CONTINUATION_LEVELS[max(found, default=0)]


class RecordKey(NamedTuple):
    """What names one record in a run: a problem under one condition with one sampling seed, for
    the self-consistency samples (condition `consistency`) the sample's index, and for an arm at
    a cut other than the paper's (`nudge run --cuts`) the cut's index in its base's ids.

    It prints as the plain tuple, without the sample or cut when there is none: `('q1', 'B', 0)`;
    an arm at token 37 of its base's reasoning as `('q1', 'doubt', 0, '@37')`.
    """

    problem_id: str
    condition: str
    seed: int
    sample: int | None = None  # only the self-consistency samples have one
    at: int | None = None  # only arms at an extra cut have one

    @classmethod
    def of(cls, record: Mapping | Record | ResolutionRecord) -> RecordKey:
        """The key of a record or a resolution, typed or as read from a JSON line."""
        if not isinstance(record, Mapping):
            sample = getattr(record, "sample", None)  # a resolution has neither
            at = getattr(record, "at", None)
            return cls(record.problem_id, record.condition, record.seed, sample, at)
        return cls(
            record["problem_id"],
            record["condition"],
            record["seed"],
            record.get("sample"),
            record.get("at"),
        )

    @property
    def compact(self) -> tuple:
        """The key as a plain tuple, the form error messages show: three fields, then the sample
        and `'@'` + the cut where there are."""
        tail = () if self.sample is None else (self.sample,)
        return tuple(self)[:3] + tail + (() if self.at is None else (f"@{self.at:06d}",))

    @property
    def order(self) -> tuple:
        """The order keys sort in: problem, condition, seed, then the cut (the paper's first)
        and the sample (the first, None, first)."""
        at = -1 if self.at is None else self.at
        return (*tuple(self)[:3], at, -1 if self.sample is None else self.sample)

    def __str__(self) -> str:
        return repr(self.compact)


def boundary_of(data: Mapping) -> int | None:
    """The boundary of a record read as a JSON object, for an audit that reads lines it cannot
    trust whole (KeyError when the line has none)."""
    return data["boundary"]


def _action(data: object) -> Action | None:
    return None if data is None else Action(**data)


def _grade(data: object) -> GradeRecord | None:
    return None if data is None else GradeRecord(**data)


def _likelihoods(data: object) -> Likelihoods | None:
    return None if data is None else Likelihoods(**data)


@dataclass(frozen=True)
class Likelihoods:
    """An arm's likelihoods under the model at its cut (`nudge run --likelihoods`;
    splice/run/units/likelihoods.py), in nats, each from a teacher-forced forward of the arm's context.

    `splice_logprobs` holds log p(token | prompt, reasoning, earlier splice tokens) for each token
    of the arm's splice (the think-close ids included for a sealed arm; empty for `empty`), and
    `splice_logprob` their sum: how far off the model's own path the nudge lies. On a sealed arm
    `tool_opener_logprob` and `answer_opener_logprob` are the log-probabilities of the family's
    tool-call opener and of the task's answer opener right after the splice
    (splice/experiment/openers.py); None elsewhere.
    """

    splice_logprobs: list[float]
    splice_logprob: float
    tool_opener_logprob: float | None = None
    answer_opener_logprob: float | None = None

    @property
    def p_tool(self) -> float | None:
        """P(TOOL): the probability of the tool-call opener right after the think-close."""
        return None if self.tool_opener_logprob is None else math.exp(self.tool_opener_logprob)

    @property
    def p_answer(self) -> float | None:
        """P(answer): the probability of the answer opener right after the think-close."""
        return None if self.answer_opener_logprob is None else math.exp(self.answer_opener_logprob)


def _fields_of(cls, data: Mapping, lenient: bool) -> dict:
    """The dataclass fields of `cls` from a JSON object. A field the object lacks is a KeyError
    naming it, unless it has a default or `lenient` (then it reads as None: a record written by
    hand or by a version without it)."""
    found = {}
    for field in fields(cls):
        if field.name in data:
            found[field.name] = data[field.name]
        elif field.default is MISSING:  # a required field
            if not lenient:
                raise KeyError(field.name)
            found[field.name] = None
    return found


@dataclass(frozen=True)
class Record:
    problem_id: str
    task: str  # "musique" | "strategyqa"
    condition: str  # a code from nudgeability.splice.experiment.conditions
    sentence_id: str | None  # the inserted sentence's id in the sentences file; None: NT, B, empty
    seed: int  # decoding seed (0 for greedy runs)
    prompt_tokens: int  # token count of the rendered prompt (unaided or with-tool)
    prompt_sha256: str  # sha256 of the prompt ids as little-endian int32 bytes
    prefix_tokens: int | None  # arms: tokens of the B reasoning prefix r_i (after the prompt)
    boundary: int | None  # B / oracle_B: index in generated_ids of the first think-close
    generated_ids: list[int]
    text: str  # decoded generated_ids, special tokens kept
    finish_reason: str  # "eos" | "stop_token" | "stop_string" | "length"
    action: Action
    grade: GradeRecord | None  # NT always; B / oracle_B when the action is SELF; else None
    # how faithfully the backend continued the prompt (CONTINUATION_LEVELS): written only when it
    # is not token-exact, so the records of a local run keep their bytes
    continuation: str = "token"
    # The self-consistency samples (condition `consistency`): which of the K samples, 0..K-1.
    sample: int | None = None
    # The uncertainty signals (splice/run/units/signals.py): on B, its token uncertainty up to the cut and
    # the reference of its hidden state; on a consistency sample, its answer key. None elsewhere.
    signals: dict | None = None
    # B / oracle_B that closed their thinking: where the cut falls in `text`, in characters (the
    # length of the decoded ids before `boundary`), so that a reader splits the text without the
    # tokenizer. None elsewhere, and in records written before the field existed.
    cut: int | None = None
    # Arms of a run with --likelihoods: the splice's log-probabilities and, on sealed arms, the
    # action openers' (`Likelihoods`). None elsewhere, and in every run without the flag.
    likelihoods: Likelihoods | None = None
    # Arms at a cut other than the paper's (`nudge run --cuts`): the cut's index in the base's
    # generated ids (the reasoning an arm keeps is what precedes it, less a deleted sentence).
    # None at the paper's cut, just before the think-close.
    at: int | None = None
    # B / oracle_B of a run with --cuts that closed their thinking: the extra cuts their arms fork
    # at (indices in generated_ids, ascending, each before `boundary`). None elsewhere.
    cuts: list[int] | None = None

    def to_json(self) -> str:
        """One line of JSON with sorted keys: the byte-exact form written to records.jsonl.

        `continuation` is left out when token-exact, and `sample`, `signals`, `cut`,
        `likelihoods`, `at` and `cuts` when None, so the records of local runs without them keep the bytes they
        always had."""
        data = asdict(self)
        if data["continuation"] == "token":
            del data["continuation"]
        for key in OPTIONAL_FIELDS:
            if data[key] is None:
                del data[key]
        return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping, *, lenient: bool = False) -> Record:
        """The record of a JSON object (a KeyError names a missing field; `lenient`: absent
        fields read as None)."""
        found = _fields_of(cls, data, lenient)
        found["action"] = _action(found["action"])
        found["grade"] = _grade(found["grade"])
        found["likelihoods"] = _likelihoods(found.get("likelihoods"))
        return cls(**found)

    @classmethod
    def from_json(cls, line: str) -> Record:
        """The record of one stored line (the runner reading its own parts back)."""
        return cls.from_dict(json.loads(line))


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
    action: Action | None  # the turn's action; TOOL = a second call, not executed
    grade: GradeRecord | None  # SELF only

    def to_json(self) -> str:
        """One line of JSON with sorted keys, as Record.to_json."""
        return json.dumps(asdict(self), sort_keys=True, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping, *, lenient: bool = False) -> ResolutionRecord:
        found = _fields_of(cls, data, lenient)
        found["action"] = _action(found["action"])
        found["grade"] = _grade(found["grade"])
        return cls(**found)


# ---------------------------------------------------------------- the readers of a run directory
_REQUIRED = ("problem_id", "task", "condition", "seed", "action")
_RESOLUTION_REQUIRED = ("problem_id", "condition", "seed", "tool_name", "executed", "action")
Error = Callable[[str], Exception]


def _typed(cls, data: dict, where: str, error: Error):
    try:
        return cls.from_dict(data, lenient=True)
    except (TypeError, ValueError) as exc:
        raise error(f"{where}: {exc}") from None


def read_records(path: str | Path, error: Error) -> Iterator[tuple[int, Record]]:
    """(line number, Record) for each non-blank line of a records.jsonl, each checked for the
    fields a reader relies on; `error` (built from a message `PATH:LINE: REASON`) otherwise. A
    field other than those that a line lacks reads as None (`Record.from_dict`, lenient)."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: missing (a run directory needs {RECORDS})")
    for number, data in read_json_lines(path, error):
        where = f"{path}:{number}"
        missing = [key for key in _REQUIRED if key not in data]
        if missing:
            raise error(f"{where}: missing field(s) {', '.join(missing)}")
        sample = data.get("sample")
        if sample is not None and (not isinstance(sample, int) or isinstance(sample, bool)):
            raise error(f"{where}: field sample must be an integer or absent")
        at = data.get("at")
        if at is not None and (not isinstance(at, int) or isinstance(at, bool) or at < 0):
            raise error(f"{where}: field at must be a non-negative integer or absent")
        for key, kind in (("problem_id", str), ("condition", str), ("seed", int)):
            if not isinstance(data[key], kind) or isinstance(data[key], bool):
                raise error(f"{where}: field {key} must be a {kind.__name__}")
        action = data["action"]
        if not isinstance(action, dict) or "kind" not in action:
            raise error(f"{where}: field action must be an object with a 'kind'")
        if action["kind"] not in ACTION_KINDS:
            raise error(
                f"{where}: field action.kind: unknown action kind {action['kind']!r}: "
                f"expected one of {', '.join(ACTION_KINDS)}"
            )
        grade = data.get("grade")
        if grade is not None and not (isinstance(grade, dict) and "correct" in grade):
            raise error(f"{where}: field grade must be null or an object with 'correct'")
        signals = data.get("signals")
        if signals and not isinstance(signals, dict):
            raise error(f"{where}: field signals must be an object")
        level = data.get("continuation", "token")
        if level not in CONTINUATION_LEVELS:
            raise error(
                f"{where}: field continuation {level!r} is not one of "
                f"{', '.join(CONTINUATION_LEVELS)}"
            )
        yield number, _typed(Record, data, where, error)


def read_resolutions(path: str | Path, error: Error) -> Iterator[tuple[int, ResolutionRecord]]:
    """(line number, ResolutionRecord) of a resolutions.jsonl, each line checked for the fields
    the delegation join reads (`error` as for `read_records`)."""
    for number, data in read_json_lines(Path(path), error):
        missing = [key for key in _RESOLUTION_REQUIRED if key not in data]
        if missing:
            raise error(f"{path}:{number}: missing field(s) {', '.join(missing)}")
        yield number, _typed(ResolutionRecord, data, f"{path}:{number}", error)
