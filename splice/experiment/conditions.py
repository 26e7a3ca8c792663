"""The experiment's conditions (runs) as data, and parsing a user's `--conditions` list.

Each problem is run unaided (NT) and with the tool (B). Every *arm* then forks from a base's
reasoning prefix, cut just before the think-close marker, and does what its intervention says
(splice/experiment/interventions.py: insert a sentence, or nothing for `empty`; seal; delete or
replace the last sentence) before the model continues. Open continuation is the primary
condition; a *sealed* arm appends the family's think-close marker right after the sentence. The
oracle runs do the same with the `ask_expert` tool, forking from their own base `oracle_B`.

The shipped codes are fixed: records, the runner and `nudgeability.stats` all use them. A run's
own interventions (`nudge run --interventions FILE`, splice/experiment/intervention_file.py) are
registered here by `register_user_conditions` when the run is prepared or its manifest is read,
so that every reader that looks a condition or a pair up by code finds them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

from nudgeability.splice.experiment.interventions import (
    ORACLE_BASE,
    SHIPPED,
    TOOL_BASE,
    Intervention,
)

POLARITY_NAMES = MappingProxyType({"+": "confidence", "-": "doubt"})
VOICES = ("first", "second", "reviewer", "expert")
NO_TOOL_BASE = "NT"  # the unaided base: its graded answer is the competence label
PRIMARY_PAIR = "first"
# The column header of each +/- pair in the report's controls table (stats/report/tables/experiments.py);
# a user's pair is headed "S <name>" (register_user_conditions).
_HEADERS = dict(
    {
        "first": "S",
        "second": "S 2nd",
        "reviewer": "S rev",
        "expert": "S exp",
        "sealed": "S sealed",
        "oracle": "S oracle",
    }
)
PAIR_HEADERS: MappingProxyType[str, str] = MappingProxyType(_HEADERS)


class UnknownConditionError(ValueError):
    """A name in a conditions list that is neither a condition code nor a preset."""


@dataclass(frozen=True)
class Condition:
    """One run of a problem.

    kind: "base" (NT, B, oracle_B: generated from the prompt), "arm" (forked from `parent`) or
        "samples" (`consistency`: K unaided samples per problem for the self-consistency signal,
        run when `--consistency-samples K` asks for them, never the competence label).
    polarity: "+" confidence, "-" doubt, "0" neutral, None for bases and the empty splice.
    voice: who the sentence speaks as ("first", "second", "reviewer", "expert"), None if no voice.
    sealed: the think-close marker follows the sentence at once.
    oracle: the prompt declares `ask_expert` instead of the task's tool.
    parent: the base an arm forks from ("B" or "oracle_B"); None for bases.
    pair: the +/- contrast a confidence or doubt arm belongs to (a key of PAIR_HEADERS).
    label: the short name figures print under the condition.
    sentence: the id of a shipped arm's sentence in the sentences file.
    text: a user's arm's inserted text ("" for `empty`: nothing).
    edit: "delete" or "replace" the last sentence before the cut; None: the reasoning stays whole.
    user: defined by the run's interventions file, not shipped.
    """

    code: str
    description: str
    kind: str
    polarity: str | None = None
    voice: str | None = None
    sealed: bool = False
    oracle: bool = False
    parent: str | None = None
    pair: str | None = None
    label: str = ""
    sentence: str | None = None
    text: str | None = None
    edit: str | None = None
    user: bool = False

    @property
    def sentence_id(self) -> str | None:
        """The id of the inserted sentence in the sentences file ("first.doubt", "neutral"), or
        None (bases, `empty`, a user's arm, whose text the manifest records)."""
        return self.sentence

    @property
    def is_control(self) -> bool:
        """An arm without a confidence or doubt sentence (empty, neutral)."""
        return self.kind == "arm" and self.polarity not in POLARITY_NAMES


def arm_condition(intervention: Intervention, user: bool = False) -> Condition:
    """The condition of one arm (splice/experiment/interventions.py `Intervention`)."""
    return Condition(
        intervention.code,
        intervention.description,
        "arm",
        intervention.polarity_code,
        intervention.voice,
        sealed=intervention.seal,
        oracle=intervention.base == ORACLE_BASE,
        parent=intervention.base,
        pair=intervention.pair,
        label=intervention.label or intervention.code,
        sentence=intervention.sentence,
        text=intervention.text if intervention.sentence is None else None,
        edit=intervention.edit,
        user=user,
    )


_NT = Condition(
    NO_TOOL_BASE,
    "unaided base: no tool; its graded answer is the competence label",
    "base",
    label="NT",
)
_B = Condition(
    TOOL_BASE,
    "with-tool base: gives the reasoning prefix and the base action",
    "base",
    label="B",
)
_ORACLE_B = Condition(
    ORACLE_BASE,
    "oracle base: the with-tool prompt with ask_expert as the tool",
    "base",
    oracle=True,
    label="oracle B",
)
_SHIPPED_ARMS = [arm_condition(intervention) for intervention in SHIPPED]
# The bases, each before the arms that fork from it, the arms in the order SHIPPED lists them.
CONDITIONS: tuple[Condition, ...] = (
    _NT,
    _B,
    *(c for c in _SHIPPED_ARMS if c.parent == TOOL_BASE),
    _ORACLE_B,
    *(c for c in _SHIPPED_ARMS if c.parent == ORACLE_BASE),
)
CONSISTENCY = "consistency"
# Not in CONDITIONS: it is not a run the conditions list selects but part of the uncertainty
# signals (splice/run/units/signals.py), added by `--consistency-samples K`.
CONSISTENCY_CONDITION = Condition(
    CONSISTENCY,
    "K unaided samples at temperature 1.0, top-p 0.95: the self-consistency signal",
    "samples",
    label="SC",
)


def with_consistency(conditions: list[Condition], samples: int) -> list[Condition]:
    """A run's conditions in plan order: `--consistency-samples K` (K > 0) adds the samples right
    after the first base (NT), whose prompt they share (plan.BASE_PHASES)."""
    if not samples:
        return list(conditions)
    return [conditions[0], CONSISTENCY_CONDITION, *conditions[1:]]


CONDITION_CODES: tuple[str, ...] = tuple(condition.code for condition in CONDITIONS)
BASE_CODES: tuple[str, ...] = tuple(c.code for c in CONDITIONS if c.kind == "base")
ARM_BASES: tuple[str, ...] = tuple(
    code for code in BASE_CODES if any(c.parent == code for c in CONDITIONS)
)  # the bases arms fork from ("B", "oracle_B"), in canonical order
# What generates from a prompt, in order of work: the bases, with the consistency samples right
# after NT (they use NT's unaided prompt).
PROMPT_PHASES: tuple[str, ...] = (BASE_CODES[0], CONSISTENCY, *BASE_CODES[1:])


def _report_order() -> tuple[str, ...]:
    # Each base, then its controls (empty, neutral), then its confidence and doubt arms.
    order: list[str] = []
    for base in BASE_CODES:
        arms = [c for c in CONDITIONS if c.parent == base]
        order += [base, *(c.code for c in arms if c.is_control)]
        order += [c.code for c in arms if not c.is_control]
    return tuple(order)


REPORT_ORDER: tuple[str, ...] = _report_order()  # the order reports and figures list conditions


def report_order() -> tuple[str, ...]:
    """REPORT_ORDER, then the user's arms registered in this process, in the order registered."""
    return (*REPORT_ORDER, *_USER)


class Pair(NamedTuple):
    """A +/- contrast: the confidence arm, the doubt arm and the base both fork from."""

    plus: str
    minus: str
    base: str


def _pairs(conditions: Iterable[Condition]) -> dict[str, Pair]:
    """The named pairs among `conditions`; `UnknownConditionError` for a pair with one side only,
    two arms on one side or sides on two bases."""
    signed: dict[str, dict[str, Condition]] = {}
    for condition in conditions:
        if condition.pair is not None:
            sides = signed.setdefault(condition.pair, {})
            if condition.polarity in sides:
                raise UnknownConditionError(
                    f"pair {condition.pair!r} has two {condition.polarity!r} arms: "
                    f"{sides[condition.polarity].code}, {condition.code}"
                )
            sides[condition.polarity or ""] = condition
    pairs = {}
    for name, arms in signed.items():
        plus, minus = arms.get("+"), arms.get("-")
        if plus is None or minus is None:
            one = (plus or minus).code
            raise UnknownConditionError(
                f"pair {name!r} has one side only ({one}): give a + and a -"
            )
        if plus.parent != minus.parent:
            raise UnknownConditionError(f"pair {name!r}: its + and - arms fork from two bases")
        pairs[name] = Pair(plus.code, minus.code, plus.parent)
    return pairs


# name -> (confidence arm, doubt arm, base), in order of first appearance in CONDITIONS, then the
# user's pairs (register_user_conditions).
_PAIRS = _pairs(CONDITIONS)
PAIRS: MappingProxyType[str, Pair] = MappingProxyType(_PAIRS)
SHIPPED_PAIRS: tuple[str, ...] = tuple(_PAIRS)
if set(SHIPPED_PAIRS) != set(_HEADERS):
    raise AssertionError("every shipped pair needs a header in PAIR_HEADERS")
# The user's conditions registered in this process, by code, in the order registered. A registry
# rather than an argument because the stats and the report look conditions and pairs up by code in
# many modules; a code may be registered again only with the same definition.
_USER: dict[str, Condition] = {}


def register_user_conditions(conditions: Iterable[Condition]) -> None:
    """Make a run's own arms known by code (get_condition, parse_conditions, PAIRS).

    Refuses (`UnknownConditionError`) a code or pair name that a shipped condition or preset
    already uses, a code already registered with another definition, and a pair with one side
    only. Registering the same definitions again changes nothing.
    """
    new = [c for c in conditions if _USER.get(c.code) != c]
    taken = {c.lower() for c in (*CONDITION_CODES, *PRESETS, CONSISTENCY)}
    for condition in new:
        if condition.code.lower() in taken:
            raise UnknownConditionError(
                f"code {condition.code!r} is a shipped condition's or preset's; choose another"
            )
        if condition.code in _USER:
            raise UnknownConditionError(
                f"condition {condition.code!r} is already defined otherwise in this process"
            )
    pairs = _pairs([*_USER.values(), *new])
    for name in pairs:
        if name in SHIPPED_PAIRS:
            raise UnknownConditionError(f"pair {name!r} is a shipped pair's name; choose another")
    _USER.update({c.code: c for c in new})
    _PAIRS.update(pairs)
    _HEADERS.update({name: f"S {name}" for name in pairs if name not in _HEADERS})


def forget_user_conditions() -> None:
    """Forget every user's condition and pair registered in this process (a test's clean slate)."""
    for condition in _USER.values():
        if condition.pair is not None:
            _PAIRS.pop(condition.pair, None)
            _HEADERS.pop(condition.pair, None)
    _USER.clear()


def user_conditions() -> tuple[Condition, ...]:
    """The user's conditions registered in this process, in the order registered."""
    return tuple(_USER.values())


def all_conditions() -> tuple[Condition, ...]:
    """The canonical order: each base, then its shipped arms, then the user's arms on it (with
    no user's arm, CONDITIONS)."""
    order: list[Condition] = []
    for base in (c for c in CONDITIONS if c.kind == "base"):
        order.append(base)
        order += [c for c in CONDITIONS if c.parent == base.code]
        order += [c for c in _USER.values() if c.parent == base.code]
    return tuple(order)


PRESETS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType(
    {
        "primary": ("NT", "B", "empty", "conf", "doubt", "neutral"),
        "voices": (
            "NT",
            "B",
            "conf",
            "doubt",
            "conf_second",
            "doubt_second",
            "conf_reviewer",
            "doubt_reviewer",
            "conf_expert",
            "doubt_expert",
        ),
        "sealed": ("NT", "B", "sealed_conf", "sealed_doubt"),
        "oracle": ("NT", "B", "oracle_B", "oracle_conf", "oracle_doubt"),
        "all": CONDITION_CODES,
    }
)


def base_of(condition: Condition) -> str:
    """The base whose prompt a condition uses: itself for a base, its parent for an arm."""
    return condition.code if condition.kind == "base" else condition.parent


def get_condition(code: str) -> Condition:
    """The condition with this code (case-insensitive), shipped or registered by the user;
    `UnknownConditionError` if there is none."""
    for condition in (*CONDITIONS, *_USER.values()):
        if condition.code.lower() == code.lower():
            return condition
    raise UnknownConditionError(f"unknown condition '{code}'; {_known()}")


def parse_conditions(spec: str | Iterable[str]) -> list[Condition]:
    """Resolve a comma-separated list of codes and presets into conditions, in canonical order.

    Names match case-insensitively; presets are `primary` (NT, B, empty, conf, doubt, neutral),
    `voices`, `sealed`, `oracle` and `all`. The bases a list needs are added implicitly: every
    arm brings its parent base (B or oracle_B), and every list brings NT, since each estimator
    that uses a base or an arm needs the competence label. The result follows the canonical order
    (`all_conditions`), whatever the order given, and holds each condition once.

    Raises `UnknownConditionError` naming the unknown name and listing the known ones.
    """
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    names = [name.strip() for name in names if name.strip()]
    if not names:
        raise UnknownConditionError(f"the conditions list is empty; {_known()}")
    wanted: set[str] = set()
    for name in names:
        preset = PRESETS.get(name.lower())
        codes = preset if preset is not None else (get_condition(name).code,)
        for code in codes:
            condition = get_condition(code)
            wanted.update({condition.code, NO_TOOL_BASE})
            if condition.parent is not None:
                wanted.add(condition.parent)
    return [condition for condition in all_conditions() if condition.code in wanted]


def _known() -> str:
    codes = (*CONDITION_CODES, *_USER)
    return f"known conditions: {', '.join(codes)}; presets: {', '.join(PRESETS)}"
