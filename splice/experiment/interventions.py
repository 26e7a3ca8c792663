"""A condition, and what an arm does at the cut, as one small object: `Condition`.

Every arm of the experiment forks from a base's reasoning (B's or oracle_B's ids before its first
think-close, splice/README.md *The cut*) and does one thing there: it may delete or replace the
last sentence of that reasoning (`edit`; the sentence is found on the base's own token ids by
splice/experiment/sentence_split.py, so the edit falls on a token boundary of what the model
wrote), insert a text (tokenised on its own, as every splice is: models/families/base.py
`splice_ids`), and seal (append the family's think-close). Its arms may be the "+" or the "-"
side of a named pair, which the statistics contrast for S, WT and L (stats/README.md).

An arm's intervention *is* its condition: a user's file writes `Intervention(...)`, the same type
the runner, the plan and the statistics read, so a field has one name from the file to the report.
The bases (NT, B, oracle_B) and the consistency samples are conditions of another `kind`. The
shipped arms are defined here (`SHIPPED`); splice/experiment/conditions.py orders them with the
bases and a run's own (`ConditionSet`); a user's file is loaded by
splice/experiment/intervention_file.py and checked by `check_intervention`.
"""

from __future__ import annotations

from dataclasses import dataclass

TOOL_BASE = "B"  # the with-tool base: the reasoning prefix most arms fork from
ORACLE_BASE = "oracle_B"  # the base whose tool is ask_expert
ARM_BASES = (TOOL_BASE, ORACLE_BASE)  # the bases an arm may fork from, in canonical order
EDITS = ("delete", "replace")  # what may be done to the last sentence before the cut
SIDES = ("+", "-")  # the sides of a pair: "+" is subtracted from "-" in S
KINDS = ("base", "arm", "samples")


class InterventionError(ValueError):
    """An intervention that cannot run; `field` names the attribute at fault."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


@dataclass(frozen=True)
class Condition:
    """One run of a problem: a base, the consistency samples, or an arm and what it does.

    code: the condition code its records carry (letters, digits and `_`).
    description: one line for the reader of the run.
    base: the base an arm forks from ("B" or "oracle_B"); None for a base and the samples.
    text: what is inserted at the cut (after the edit, if any), tokenised on its own with the
        family's separator and suffix; "" inserts nothing. Shipped arms name a `sentence` of the
        sentences file instead.
    seal: the family's think-close follows the text at once.
    edit: "delete" removes the last sentence before the cut; "replace" removes it and inserts
        `text` in its place; None leaves the reasoning whole.
    pair, side: the named +/- contrast this arm is one side of ("+" or "-"), or None; the
        shipped neutral arm's side is "0" (a sentence of neither side, in no pair).
    label: the short name figures print under it ("": the code; `short_name`).
    sentence, voice: the shipped arms' sentence id and voice, which the sentences file and the
        report read.
    kind: "arm", "base" (NT, B, oracle_B: generated from the prompt) or "samples"
        (`consistency`: K unaided samples per problem for the self-consistency signal).
    user: defined by the run's interventions file, not shipped.
    """

    code: str
    description: str
    base: str | None = TOOL_BASE
    text: str | None = None
    seal: bool = False
    edit: str | None = None
    pair: str | None = None
    side: str | None = None
    label: str = ""
    sentence: str | None = None
    voice: str | None = None
    kind: str = "arm"
    user: bool = False

    @property
    def oracle(self) -> bool:
        """Its prompt declares `ask_expert` instead of the task's tool (oracle_B and its arms)."""
        return ORACLE_BASE in (self.code, self.base)

    @property
    def short_name(self) -> str:
        """What figures print under it: its label, else its code."""
        return self.label or self.code

    @property
    def sentence_id(self) -> str | None:
        """The id of the inserted sentence in the sentences file ("first.doubt", "neutral"), or
        None (bases, `empty`, a user's arm, whose text the manifest records)."""
        return self.sentence

    @property
    def is_control(self) -> bool:
        """An arm without a confidence or doubt sentence (empty, neutral)."""
        return self.kind == "arm" and self.side not in SIDES

    def to_dict(self) -> dict:
        """The fields a user's arm is recorded with in the run manifest (what its file gave)."""
        return {name: getattr(self, name) for name in DEFINITION_FIELDS}


Intervention = Condition  # what a user's interventions file calls an arm: the same type
# The fields a user's arm may give (a data file's keys, the manifest's `interventions` entries).
DEFINITION_FIELDS = ("code", "description", "base", "text", "seal", "edit", "pair", "side", "label")


def check_intervention(intervention: Condition) -> None:
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
    if intervention.kind != "arm":
        raise InterventionError("kind", "an intervention is an arm: leave kind out")
    if not isinstance(intervention.label, str):
        raise InterventionError("label", "label must be a string")
    if (intervention.pair is None) != (intervention.side is None):
        raise InterventionError("side", "give both pair and side, or neither")
    if intervention.side not in (None, *SIDES):
        raise InterventionError("side", f"side {intervention.side!r}: use '+' or '-'")


def _voice_pair(voice: str, tag: str) -> tuple[Condition, ...]:
    return tuple(
        Condition(
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
SHIPPED: tuple[Condition, ...] = (
    Condition(
        "empty",
        "B's prefix cut before think-close, regenerated with nothing inserted",
        text="",
        label="∅",
    ),
    Condition(
        "conf",
        "first-person confidence sentence, open continuation (primary)",
        sentence="first.confidence",
        voice="first",
        pair="first",
        side="+",
        label="+",
    ),
    Condition(
        "doubt",
        "first-person doubt sentence, open continuation (primary)",
        sentence="first.doubt",
        voice="first",
        pair="first",
        side="-",
        label="−",
    ),
    Condition(
        "neutral",
        "neutral sentence, open continuation",
        sentence="neutral",
        side="0",
        label="0",
    ),
    *_voice_pair("second", "2nd"),
    *_voice_pair("reviewer", "rev"),
    *_voice_pair("expert", "exp"),
    Condition(
        "sealed_conf",
        "first-person confidence sentence, then think-close at once",
        sentence="first.confidence",
        voice="first",
        seal=True,
        pair="sealed",
        side="+",
        label="+ sealed",
    ),
    Condition(
        "sealed_doubt",
        "first-person doubt sentence, then think-close at once",
        sentence="first.doubt",
        voice="first",
        seal=True,
        pair="sealed",
        side="-",
        label="− sealed",
    ),
    Condition(
        "oracle_conf",
        "first-person confidence sentence on the oracle base's prefix",
        base=ORACLE_BASE,
        sentence="first.confidence",
        voice="first",
        pair="oracle",
        side="+",
        label="oracle +",
    ),
    Condition(
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
