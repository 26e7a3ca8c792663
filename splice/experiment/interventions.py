"""What an arm does at the cut, as one small object: `Intervention`.

Every arm of the experiment forks from a base's reasoning (B's or oracle_B's ids before its first
think-close, splice/README.md *The cut*) and does one thing there: it may delete or replace the
last sentence of that reasoning (`edit`; the sentence is found on the base's own token ids by
splice/experiment/sentence_split.py, so the edit falls on a token boundary of what the model
wrote), insert a text (tokenised on its own, as every splice is: models/families/base.py
`splice_ids`), and seal (append the family's think-close). Its arms may be the "+" or the "-"
side of a named pair, which the statistics contrast for S, WT and L (stats/README.md).

The shipped arms are defined here (`SHIPPED`) and made into the run's conditions by
splice/experiment/conditions.py; a user's file of further interventions is loaded by
splice/experiment/intervention_file.py and checked by `check_intervention`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

TOOL_BASE = "B"  # the with-tool base: the reasoning prefix most arms fork from
ORACLE_BASE = "oracle_B"  # the base whose tool is ask_expert
ARM_BASES = (TOOL_BASE, ORACLE_BASE)  # the bases an arm may fork from
EDITS = ("delete", "replace")  # what may be done to the last sentence before the cut
SIDES = ("+", "-")  # the sides of a pair: "+" is subtracted from "-" in S


class InterventionError(ValueError):
    """An intervention that cannot run; `field` names the attribute at fault."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


@dataclass(frozen=True)
class Intervention:
    """One arm: what it does at the cut of `base`'s reasoning.

    code: the condition code its records carry (letters, digits and `_`).
    description: one line for the reader of the run.
    base: the base it forks from ("B" or "oracle_B").
    text: what is inserted at the cut (after the edit, if any), tokenised on its own with the
        family's separator and suffix; "" inserts nothing. Shipped arms name a `sentence` of the
        sentences file instead.
    seal: the family's think-close follows the text at once.
    edit: "delete" removes the last sentence before the cut; "replace" removes it and inserts
        `text` in its place; None leaves the reasoning whole.
    pair, side: the named +/- contrast this arm is one side of ("+" or "-"), or None.
    label: the short name figures print under it (default: the code).
    sentence, voice, polarity: the shipped arms' sentence id, voice and polarity ("0" neutral),
        which the sentences file and the report read.
    """

    code: str
    description: str
    base: str = TOOL_BASE
    text: str | None = None
    seal: bool = False
    edit: str | None = None
    pair: str | None = None
    side: str | None = None
    label: str = ""
    sentence: str | None = None
    voice: str | None = None
    polarity: str | None = None
    # where it was made (file, line): a user's file's errors name the line (intervention_file.py)
    where: tuple[str, int] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.where is None:
            caller = sys._getframe(2)  # the frame that called the dataclass's __init__
            object.__setattr__(self, "where", (caller.f_code.co_filename, caller.f_lineno))

    @property
    def polarity_code(self) -> str | None:
        """The condition's polarity: the pair side, else the shipped polarity ("0": neutral)."""
        return self.side if self.side is not None else self.polarity

    def to_dict(self) -> dict:
        """The fields a user's intervention is recorded with in the run manifest."""
        fields = ("code", "description", "base", "text", "seal", "edit", "pair", "side", "label")
        return {name: getattr(self, name) for name in fields}


def check_intervention(intervention: Intervention) -> None:
    """Refuse an intervention that cannot run: `InterventionError` naming the field."""
    if not isinstance(intervention.code, str) or not intervention.code.isidentifier():
        raise InterventionError("code", f"code {intervention.code!r}: use letters, digits and _")
    if not isinstance(intervention.description, str):
        raise InterventionError("description", "description must be a string")
    if intervention.base not in ARM_BASES:
        raise InterventionError(
            "base", f"unknown base {intervention.base!r}; known: {', '.join(ARM_BASES)}"
        )
    if intervention.edit not in (None, *EDITS):
        raise InterventionError(
            "edit", f"unknown edit {intervention.edit!r}; known: {', '.join(EDITS)} or None"
        )
    if intervention.edit == "delete":
        if intervention.text not in (None, ""):
            raise InterventionError("text", "a delete inserts nothing; use edit='replace'")
    elif intervention.sentence is None and not isinstance(intervention.text, str):
        raise InterventionError("text", "missing text: the string inserted at the cut")
    elif intervention.edit == "replace" and not intervention.text.strip():
        raise InterventionError("text", "a replace needs a non-empty text")
    if not isinstance(intervention.seal, bool):
        raise InterventionError("seal", "seal must be True or False")
    if (intervention.pair is None) != (intervention.side is None):
        raise InterventionError("side", "give both pair and side, or neither")
    if intervention.side not in (None, *SIDES):
        raise InterventionError("side", f"side {intervention.side!r}: use '+' or '-'")


def _voice_pair(voice: str, tag: str) -> tuple[Intervention, ...]:
    return tuple(
        Intervention(
            f"{short}_{voice}",
            f"{name} sentence in the {voice}'s voice, open continuation",
            sentence=f"{voice}.{name}",
            voice=voice,
            pair=voice,
            side=side,
            label=f"{glyph} {tag}",
        )
        for short, name, side, glyph in (
            ("conf", "confidence", "+", "+"),
            ("doubt", "doubt", "-", "−"),
        )
    )


# The shipped arms, in canonical order; the bases they fork from are in conditions.py.
SHIPPED: tuple[Intervention, ...] = (
    Intervention(
        "empty",
        "B's prefix cut before think-close, regenerated with nothing inserted",
        text="",
        label="∅",
    ),
    Intervention(
        "conf",
        "first-person confidence sentence, open continuation (primary)",
        sentence="first.confidence",
        voice="first",
        pair="first",
        side="+",
        label="+",
    ),
    Intervention(
        "doubt",
        "first-person doubt sentence, open continuation (primary)",
        sentence="first.doubt",
        voice="first",
        pair="first",
        side="-",
        label="−",
    ),
    Intervention(
        "neutral",
        "neutral sentence, open continuation",
        sentence="neutral",
        polarity="0",
        label="0",
    ),
    *_voice_pair("second", "2nd"),
    *_voice_pair("reviewer", "rev"),
    *_voice_pair("expert", "exp"),
    Intervention(
        "sealed_conf",
        "first-person confidence sentence, then think-close at once",
        sentence="first.confidence",
        voice="first",
        seal=True,
        pair="sealed",
        side="+",
        label="+ sealed",
    ),
    Intervention(
        "sealed_doubt",
        "first-person doubt sentence, then think-close at once",
        sentence="first.doubt",
        voice="first",
        seal=True,
        pair="sealed",
        side="-",
        label="− sealed",
    ),
    Intervention(
        "oracle_conf",
        "first-person confidence sentence on the oracle base's prefix",
        base=ORACLE_BASE,
        sentence="first.confidence",
        voice="first",
        pair="oracle",
        side="+",
        label="oracle +",
    ),
    Intervention(
        "oracle_doubt",
        "first-person doubt sentence on the oracle base's prefix",
        base=ORACLE_BASE,
        sentence="first.doubt",
        voice="first",
        pair="oracle",
        side="-",
        label="oracle −",
    ),
)
