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

POLARITY_NAMES = MappingProxyType({"+": "confidence", "-": "doubt"})
VOICES = ("first", "second", "reviewer", "expert")


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
    """

    code: str
    description: str
    kind: str
    polarity: str | None = None
    voice: str | None = None
    sealed: bool = False
    oracle: bool = False
    parent: str | None = None

    @property
    def sentence_id(self) -> str | None:
        """The id of the inserted sentence in the sentences file ("first.doubt", "neutral"), or None."""
        if self.polarity == "0":
            return "neutral"
        if self.polarity in POLARITY_NAMES:
            return f"{self.voice}.{POLARITY_NAMES[self.polarity]}"
        return None


def _voice_arms(voice: str) -> tuple[Condition, ...]:
    return tuple(
        Condition(
            f"{short}_{voice}",
            f"{name} sentence in the {voice}'s voice, open continuation",
            "arm",
            polarity,
            voice,
            parent="B",
        )
        for short, name, polarity in (("conf", "confidence", "+"), ("doubt", "doubt", "-"))
    )


CONDITIONS: tuple[Condition, ...] = (
    Condition("NT", "unaided base: no tool; its graded answer is the competence label", "base"),
    Condition("B", "with-tool base: gives the reasoning prefix and the base action", "base"),
    Condition(
        "empty",
        "B's prefix cut before think-close, regenerated with nothing inserted",
        "arm",
        parent="B",
    ),
    Condition(
        "conf",
        "first-person confidence sentence, open continuation (primary)",
        "arm",
        "+",
        "first",
        parent="B",
    ),
    Condition(
        "doubt",
        "first-person doubt sentence, open continuation (primary)",
        "arm",
        "-",
        "first",
        parent="B",
    ),
    Condition("neutral", "neutral sentence, open continuation", "arm", "0", parent="B"),
    *_voice_arms("second"),
    *_voice_arms("reviewer"),
    *_voice_arms("expert"),
    Condition(
        "sealed_conf",
        "first-person confidence sentence, then think-close at once",
        "arm",
        "+",
        "first",
        sealed=True,
        parent="B",
    ),
    Condition(
        "sealed_doubt",
        "first-person doubt sentence, then think-close at once",
        "arm",
        "-",
        "first",
        sealed=True,
        parent="B",
    ),
    Condition(
        "oracle_B",
        "oracle base: the with-tool prompt with ask_expert as the tool",
        "base",
        oracle=True,
    ),
    Condition(
        "oracle_conf",
        "first-person confidence sentence on the oracle base's prefix",
        "arm",
        "+",
        "first",
        oracle=True,
        parent="oracle_B",
    ),
    Condition(
        "oracle_doubt",
        "first-person doubt sentence on the oracle base's prefix",
        "arm",
        "-",
        "first",
        oracle=True,
        parent="oracle_B",
    ),
)
CONSISTENCY = "consistency"
# Not in CONDITIONS: it is not a run the conditions list selects but part of the uncertainty
# signals (splice/signals.py), added by `--consistency-samples K`.
CONSISTENCY_CONDITION = Condition(
    CONSISTENCY,
    "K unaided samples at temperature 1.0, top-p 0.95: the self-consistency signal",
    "samples",
)
CONDITION_CODES: tuple[str, ...] = tuple(condition.code for condition in CONDITIONS)

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
            wanted.update({condition.code, "NT"})
            if condition.parent is not None:
                wanted.add(condition.parent)
    return [condition for condition in CONDITIONS if condition.code in wanted]


def _known() -> str:
    return f"known conditions: {', '.join(CONDITION_CODES)}; presets: {', '.join(PRESETS)}"
