"""The experiment's conditions as data: the shipped ones, a run's own (`ConditionSet`), and
parsing a `--conditions` list.

Each problem is run unaided (NT) and with the tool (B). Every *arm* then forks from a base's
reasoning prefix, cut just before the think-close marker, and does what its intervention says
(splice/experiment/interventions.py: insert a sentence, or nothing for `empty`; seal; delete or
replace the last sentence) before the model continues. Open continuation is the primary
condition; a *sealed* arm appends the family's think-close marker right after the sentence. The
oracle runs do the same with the `ask_expert` tool, forking from their own base `oracle_B`.

The shipped codes are fixed: records, the runner and `nudgeability.stats` all use them. A run's
own arms (`nudge run --interventions FILE`, splice/experiment/intervention_file.py; recorded as
data in its manifest) join them in a `ConditionSet`: one frozen value per run, built from the
file or the manifest and handed to whatever looks a condition or a pair up by code (the plan, the
stats' tables, the report). Nothing here changes after import, so reading two runs that give one
code two meanings is two sets, never a clash in the process.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import NamedTuple

from nudgeability.splice.experiment.interventions import (
    ORACLE_BASE,
    SHIPPED,
    TOOL_BASE,
    Condition,
)

POLARITY_NAMES = MappingProxyType({"+": "confidence", "-": "doubt"})
VOICES = ("first", "second", "reviewer", "expert")
NO_TOOL_BASE = "NT"  # the unaided base: its graded answer is the competence label
PRIMARY_PAIR = "first"
# The column header of each shipped +/- pair in the report's controls table
# (stats/report/tables/experiments.py); a user's pair is headed "S <name>" (`ConditionSet`).
PAIR_HEADERS: Mapping[str, str] = MappingProxyType(
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


_NT = Condition(
    NO_TOOL_BASE,
    "unaided base: no tool; its graded answer is the competence label",
    base=None,
    kind="base",
)
_B = Condition(
    TOOL_BASE,
    "with-tool base: gives the reasoning prefix and the base action",
    base=None,
    kind="base",
)
_ORACLE_B = Condition(
    ORACLE_BASE,
    "oracle base: the with-tool prompt with ask_expert as the tool",
    base=None,
    label="oracle B",
    kind="base",
)
# The bases, each before the arms that fork from it, the arms in the order SHIPPED lists them.
CONDITIONS: tuple[Condition, ...] = (
    _NT,
    _B,
    *(c for c in SHIPPED if c.base == TOOL_BASE),
    _ORACLE_B,
    *(c for c in SHIPPED if c.base == ORACLE_BASE),
)
CONSISTENCY = "consistency"
# Not in CONDITIONS: it is not a run the conditions list selects but part of the uncertainty
# signals (splice/run/units/signals.py), added by `--consistency-samples K`.
CONSISTENCY_CONDITION = Condition(
    CONSISTENCY,
    "K unaided samples at temperature 1.0, top-p 0.95: the self-consistency signal",
    base=None,
    label="SC",
    kind="samples",
)


def with_consistency(conditions: list[Condition], samples: int) -> list[Condition]:
    """A run's conditions in plan order: `--consistency-samples K` (K > 0) adds the samples right
    after the first base (NT), whose prompt they share (plan.BASE_PHASES)."""
    if not samples:
        return list(conditions)
    return [conditions[0], CONSISTENCY_CONDITION, *conditions[1:]]


CONDITION_CODES: tuple[str, ...] = tuple(condition.code for condition in CONDITIONS)
BASE_CODES: tuple[str, ...] = tuple(c.code for c in CONDITIONS if c.kind == "base")
# What generates from a prompt, in order of work: the bases, with the consistency samples right
# after NT (they use NT's unaided prompt).
PROMPT_PHASES: tuple[str, ...] = (BASE_CODES[0], CONSISTENCY, *BASE_CODES[1:])


def _report_order() -> tuple[str, ...]:
    # Each base, then its controls (empty, neutral), then its confidence and doubt arms.
    order: list[str] = []
    for base in BASE_CODES:
        arms = [c for c in CONDITIONS if c.base == base]
        order += [base, *(c.code for c in arms if c.is_control)]
        order += [c.code for c in arms if not c.is_control]
    return tuple(order)


# The order reports and figures list the shipped conditions; a run's own follow
# (`ConditionSet.report_order`).
REPORT_ORDER: tuple[str, ...] = _report_order()


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
            if condition.side in sides:
                raise UnknownConditionError(
                    f"pair {condition.pair!r} has two {condition.side!r} arms: "
                    f"{sides[condition.side].code}, {condition.code}"
                )
            sides[condition.side or ""] = condition
    pairs = {}
    for name, arms in signed.items():
        plus, minus = arms.get("+"), arms.get("-")
        if plus is None or minus is None:
            one = (plus or minus).code
            raise UnknownConditionError(
                f"pair {name!r} has one side only ({one}): give a + and a -"
            )
        if plus.base != minus.base:
            raise UnknownConditionError(f"pair {name!r}: its + and - arms fork from two bases")
        pairs[name] = Pair(plus.code, minus.code, plus.base)
    return pairs


# The shipped pairs: name -> (confidence arm, doubt arm, base), in order of first appearance in
# CONDITIONS; a run's own follow (`ConditionSet.pairs`).
SHIPPED_PAIRS: Mapping[str, Pair] = MappingProxyType(_pairs(CONDITIONS))
if set(SHIPPED_PAIRS) != set(PAIR_HEADERS):
    raise AssertionError("every shipped pair needs a header in PAIR_HEADERS")

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


class UserConditionError(UnknownConditionError):
    """A run's own arm that cannot join the shipped ones: `index` is its place in the user's
    list, `field` the field at fault."""

    def __init__(self, index: int, field: str, message: str):
        self.index, self.field = index, field
        super().__init__(message)


def _check_user(arms: tuple[Condition, ...]) -> None:
    """Refuse a code or pair name that a shipped condition or preset uses, a code given twice, a
    pair side given twice, a pair with one side only or with its sides on two bases."""
    taken = {c.lower() for c in (*CONDITION_CODES, *PRESETS, CONSISTENCY)}
    seen: set[str] = set()
    sides: dict[str, dict[str | None, int]] = {}
    for k, arm in enumerate(arms):
        if arm.code.lower() in taken:
            raise UserConditionError(
                k, "code", f"{arm.code!r} is a shipped condition's or preset's; choose another"
            )
        if arm.code.lower() in seen:
            raise UserConditionError(k, "code", f"{arm.code!r} is defined twice")
        seen.add(arm.code.lower())
        if arm.pair is not None:
            if arm.pair in SHIPPED_PAIRS:
                raise UserConditionError(
                    k, "pair", f"{arm.pair!r} is a shipped pair's name; choose another"
                )
            pair = sides.setdefault(arm.pair, {})
            if arm.side in pair:
                raise UserConditionError(
                    k, "side", f"pair {arm.pair!r} already has a {arm.side!r} side"
                )
            pair[arm.side] = k
    for name, pair in sides.items():
        if len(pair) == 1:
            (lone,) = pair.values()
            raise UserConditionError(
                lone, "pair", f"pair {name!r} has one side only: add its other"
            )
        if arms[pair["+"]].base != arms[pair["-"]].base:
            raise UserConditionError(pair["-"], "base", f"pair {name!r}: both sides need one base")


def base_of(condition: Condition) -> str:
    """The base whose prompt a condition uses: itself for a base, its `base` for an arm."""
    return condition.code if condition.kind == "base" else condition.base


@dataclass(frozen=True)
class ConditionSet:
    """The shipped conditions and one run's own arms (`user`, in the order its file gave them):
    what a reader of that run looks a condition, a pair, a header or the report's order up in.

    Made once (from the run's interventions file, or the definitions its manifest records) and
    handed on; it never changes. Refuses (`UnknownConditionError`) a user's code or pair name that
    a shipped condition or preset uses, a code given twice, and a pair with one side only.
    """

    user: tuple[Condition, ...] = ()

    def __post_init__(self) -> None:
        _check_user(self.user)

    @cached_property
    def all(self) -> tuple[Condition, ...]:
        """The canonical order: each base, then its shipped arms, then the user's arms on it."""
        order: list[Condition] = []
        for base in (c for c in CONDITIONS if c.kind == "base"):
            order.append(base)
            order += [c for c in (*CONDITIONS, *self.user) if c.base == base.code]
        return tuple(order)

    @cached_property
    def pairs(self) -> Mapping[str, Pair]:
        """Every named pair: the shipped ones (SHIPPED_PAIRS), then the user's."""
        return MappingProxyType({**SHIPPED_PAIRS, **_pairs(self.user)})

    @cached_property
    def pair_headers(self) -> Mapping[str, str]:
        """Each pair's column header: PAIR_HEADERS, a user's pair "S <name>"."""
        return MappingProxyType({name: PAIR_HEADERS.get(name, f"S {name}") for name in self.pairs})

    @cached_property
    def report_order(self) -> tuple[str, ...]:
        """REPORT_ORDER, then the user's arms in their file's order."""
        return (*REPORT_ORDER, *(c.code for c in self.user))

    @cached_property
    def _by_code(self) -> Mapping[str, Condition]:
        return {c.code.lower(): c for c in (*CONDITIONS, *self.user)}

    def get(self, code: str) -> Condition:
        """The condition with this code (case-insensitive); `UnknownConditionError` if none."""
        found = self._by_code.get(code.lower())
        if found is None:
            raise UnknownConditionError(f"unknown condition '{code}'; {self._known()}")
        return found

    def parse(self, spec: str | Iterable[str]) -> list[Condition]:
        """Resolve a comma-separated list of codes and presets into conditions, in canonical order.

        Names match case-insensitively; presets are `primary` (NT, B, empty, conf, doubt,
        neutral), `voices`, `sealed`, `oracle` and `all`. The bases a list needs are added
        implicitly: every arm brings its base (B or oracle_B), and every list brings NT, since
        each estimator that uses a base or an arm needs the competence label. The result follows
        the canonical order (`all`), whatever the order given, and holds each condition once.

        Raises `UnknownConditionError` naming the unknown name and listing the known ones.
        """
        names = spec.split(",") if isinstance(spec, str) else list(spec)
        names = [name.strip() for name in names if name.strip()]
        if not names:
            raise UnknownConditionError(f"the conditions list is empty; {self._known()}")
        wanted: set[str] = set()
        for name in names:
            preset = PRESETS.get(name.lower())
            codes = preset if preset is not None else (self.get(name).code,)
            for code in codes:
                condition = self.get(code)
                wanted.update({condition.code, NO_TOOL_BASE})
                if condition.base is not None:
                    wanted.add(condition.base)
        return [condition for condition in self.all if condition.code in wanted]

    def _known(self) -> str:
        codes = (*CONDITION_CODES, *(c.code for c in self.user))
        return f"known conditions: {', '.join(codes)}; presets: {', '.join(PRESETS)}"


SHIPPED_CONDITIONS = ConditionSet()  # a run without interventions of its own
get_condition = SHIPPED_CONDITIONS.get  # a shipped condition by code
parse_conditions = SHIPPED_CONDITIONS.parse  # a conditions list of shipped codes


def report_order(sets: Iterable[ConditionSet]) -> tuple[str, ...]:
    """The order a report over several runs lists conditions in: REPORT_ORDER, then each run's
    own arms, first seen first."""
    return tuple(dict.fromkeys([*REPORT_ORDER, *(c for s in sets for c in s.report_order)]))


def short_names(sets: Iterable[ConditionSet]) -> dict[str, str]:
    """What a report over several runs prints under each condition code (`short_name`); a code
    two runs define differently takes the first run's."""
    names = {c.code: c.short_name for c in CONDITIONS}
    for known in sets:
        for condition in known.user:
            names.setdefault(condition.code, condition.short_name)
    return names
