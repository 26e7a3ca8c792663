"""The experiment's conditions (runs) as data, and parsing a user's `--conditions` list.

Each problem is run unaided (NT) and with the tool (B). Every *arm* then forks from a base's
reasoning prefix, cut just before the think-close marker: the arm appends one sentence (or nothing,
for `empty`) and the model continues. Open continuation is the primary condition; a *sealed* arm
appends the family's think-close marker right after the sentence. The oracle runs do the same with
the `ask_expert` tool, forking from their own base `oracle_B`.

The codes are fixed: records, the runner and `nudgeability.stats` all use them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

POLARITY_NAMES = MappingProxyType({"+": "confidence", "-": "doubt"})
VOICES = ("first", "second", "reviewer", "expert")
NO_TOOL_BASE = "NT"  # the unaided base: its graded answer is the competence label
TOOL_BASE = "B"  # the with-tool base: the reasoning prefix most arms fork from
ORACLE_BASE = "oracle_B"  # the base whose tool is ask_expert
PRIMARY_PAIR = "first"
# The column header of each +/- pair in the report's controls table (stats/report/tables/experiments.py).
PAIR_HEADERS = MappingProxyType(
    {
        "first": "S",
        "second": "S 2nd",
        "reviewer": "S rev",
        "expert": "S exp",
        "sealed": "S sealed",
        "oracle": "S oracle",
    }
)


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

    @property
    def sentence_id(self) -> str | None:
        """The id of the inserted sentence in the sentences file ("first.doubt", "neutral"), or None."""
        if self.polarity == "0":
            return "neutral"
        if self.polarity in POLARITY_NAMES:
            return f"{self.voice}.{POLARITY_NAMES[self.polarity]}"
        return None

    @property
    def is_control(self) -> bool:
        """An arm without a confidence or doubt sentence (empty, neutral)."""
        return self.kind == "arm" and self.polarity not in POLARITY_NAMES


def _voice_arms(voice: str, tag: str) -> tuple[Condition, ...]:
    return tuple(
        Condition(
            f"{short}_{voice}",
            f"{name} sentence in the {voice}'s voice, open continuation",
            "arm",
            polarity,
            voice,
            parent=TOOL_BASE,
            pair=voice,
            label=f"{glyph} {tag}",
        )
        for short, name, polarity, glyph in (
            ("conf", "confidence", "+", "+"),
            ("doubt", "doubt", "-", "−"),
        )
    )


CONDITIONS: tuple[Condition, ...] = (
    Condition(
        NO_TOOL_BASE,
        "unaided base: no tool; its graded answer is the competence label",
        "base",
        label="NT",
    ),
    Condition(
        TOOL_BASE,
        "with-tool base: gives the reasoning prefix and the base action",
        "base",
        label="B",
    ),
    Condition(
        "empty",
        "B's prefix cut before think-close, regenerated with nothing inserted",
        "arm",
        parent=TOOL_BASE,
        label="∅",
    ),
    Condition(
        "conf",
        "first-person confidence sentence, open continuation (primary)",
        "arm",
        "+",
        "first",
        parent=TOOL_BASE,
        pair="first",
        label="+",
    ),
    Condition(
        "doubt",
        "first-person doubt sentence, open continuation (primary)",
        "arm",
        "-",
        "first",
        parent=TOOL_BASE,
        pair="first",
        label="−",
    ),
    Condition(
        "neutral",
        "neutral sentence, open continuation",
        "arm",
        "0",
        parent=TOOL_BASE,
        label="0",
    ),
    *_voice_arms("second", "2nd"),
    *_voice_arms("reviewer", "rev"),
    *_voice_arms("expert", "exp"),
    Condition(
        "sealed_conf",
        "first-person confidence sentence, then think-close at once",
        "arm",
        "+",
        "first",
        sealed=True,
        parent=TOOL_BASE,
        pair="sealed",
        label="+ sealed",
    ),
    Condition(
        "sealed_doubt",
        "first-person doubt sentence, then think-close at once",
        "arm",
        "-",
        "first",
        sealed=True,
        parent=TOOL_BASE,
        pair="sealed",
        label="− sealed",
    ),
    Condition(
        ORACLE_BASE,
        "oracle base: the with-tool prompt with ask_expert as the tool",
        "base",
        oracle=True,
        label="oracle B",
    ),
    Condition(
        "oracle_conf",
        "first-person confidence sentence on the oracle base's prefix",
        "arm",
        "+",
        "first",
        oracle=True,
        parent=ORACLE_BASE,
        pair="oracle",
        label="oracle +",
    ),
    Condition(
        "oracle_doubt",
        "first-person doubt sentence on the oracle base's prefix",
        "arm",
        "-",
        "first",
        oracle=True,
        parent=ORACLE_BASE,
        pair="oracle",
        label="oracle −",
    ),
)
CONSISTENCY = "consistency"
# Not in CONDITIONS: it is not a run the conditions list selects but part of the uncertainty
# signals (splice/run/signals.py), added by `--consistency-samples K`.
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


class Pair(NamedTuple):
    """A +/- contrast: the confidence arm, the doubt arm and the base both fork from."""

    plus: str
    minus: str
    base: str


def _pairs() -> dict[str, Pair]:
    signed: dict[str, dict[str, Condition]] = {}
    for condition in CONDITIONS:
        if condition.pair is not None:
            signed.setdefault(condition.pair, {})[condition.polarity or ""] = condition
    pairs = {}
    for name, arms in signed.items():
        plus, minus = arms.get("+"), arms.get("-")
        if name not in PAIR_HEADERS or plus is None or minus is None or plus.parent != minus.parent:
            raise AssertionError(f"pair {name!r} needs a header, a + and a - arm on one base")
        pairs[name] = Pair(plus.code, minus.code, plus.parent)
    return pairs


# name -> (confidence arm, doubt arm, base), in order of first appearance in CONDITIONS.
PAIRS: MappingProxyType[str, Pair] = MappingProxyType(_pairs())

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
    """The condition with this code (case-insensitive); `UnknownConditionError` if there is none."""
    for condition in CONDITIONS:
        if condition.code.lower() == code.lower():
            return condition
    raise UnknownConditionError(f"unknown condition '{code}'; {_known()}")


def parse_conditions(spec: str | Iterable[str]) -> list[Condition]:
    """Resolve a comma-separated list of codes and presets into conditions, in canonical order.

    Names match case-insensitively; presets are `primary` (NT, B, empty, conf, doubt, neutral),
    `voices`, `sealed`, `oracle` and `all`. The bases a list needs are added implicitly: every
    arm brings its parent base (B or oracle_B), and every list brings NT, since each estimator
    that uses a base or an arm needs the competence label. The result follows the order of
    `CONDITIONS`, whatever the order given, and holds each condition once.

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
    return [condition for condition in CONDITIONS if condition.code in wanted]


def _known() -> str:
    return f"known conditions: {', '.join(CONDITION_CODES)}; presets: {', '.join(PRESETS)}"
