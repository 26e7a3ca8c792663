"""The committed action read after the final think-close marker.

Kinds follow splice/README.md, "Actions": SELF (a final answer), TOOL (a well-formed call of a declared
tool), OTHER (a completed commitment that is malformed, with a reason) and TRUNC (no completed
commitment within the token budget, with a reason saying where the budget ran out).
"""

from __future__ import annotations

from dataclasses import dataclass

SELF = "SELF"
TOOL = "TOOL"
OTHER = "OTHER"
TRUNC = "TRUNC"
ACTION_KINDS = (SELF, TOOL, OTHER, TRUNC)

# OTHER reasons: a commitment was completed but is malformed.
UNDECLARED_TOOL = "undeclared_tool"  # a call of a name the prompt did not declare
UNPARSABLE_ARGUMENTS = "unparsable_arguments"  # a call whose name or arguments cannot be read
CALL_AND_ANSWER = "call_and_answer"  # a tool call and an answer in the task's format both
# A declared tool's call written as bare or fenced JSON, outside the family's call syntax: a
# commitment to delegate that no serving stack would execute (see models/README.md).
CALL_OUTSIDE_FORMAT = "call_outside_format"
EMPTY_COMMITMENT = "empty_commitment"  # the turn ended with nothing after the think-close
THINK_NEVER_CLOSED = "think_never_closed"  # the turn ended inside the thinking block
THINK_REOPENED = (
    "think_reopened"  # a think block reopened after the final close and the turn ended in it
)
OTHER_REASONS = (
    UNDECLARED_TOOL,
    UNPARSABLE_ARGUMENTS,
    CALL_AND_ANSWER,
    CALL_OUTSIDE_FORMAT,
    EMPTY_COMMITMENT,
    THINK_NEVER_CLOSED,
    THINK_REOPENED,
)

# The finish reason of a generation that spent its token budget (one of the engine's
# FINISH_REASONS, engine/sequence.py, which owns them): the only one the parser tells apart, as
# every other reason ended the turn. Spelled here so that models/ does not import the engine.
BUDGET_SPENT = "length"

# TRUNC reasons: where the budget ran out.
BUDGET_IN_THINKING = "budget_in_thinking"
BUDGET_AFTER_THINK = "budget_after_think"  # closed, but nothing written yet
BUDGET_IN_ANSWER = "budget_in_answer"  # answer text not finished (no end of turn)
BUDGET_IN_TOOL_CALL = "budget_in_tool_call"  # a call was opened and not closed
TRUNC_REASONS = (BUDGET_IN_THINKING, BUDGET_AFTER_THINK, BUDGET_IN_ANSWER, BUDGET_IN_TOOL_CALL)


@dataclass(frozen=True)
class Action:
    """One committed action.

    SELF carries `answer`; TOOL carries `tool_name`, `arguments` and any `narration` written beside
    the call; OTHER carries `reason` (one of
    OTHER_REASONS) and, when a call was seen, `tool_name`; TRUNC carries `reason` (one of
    TRUNC_REASONS). Records store this dataclass as it is (`nudgeability.splice.rundir.records`), and
    `nudgeability.stats.actions` codes its kinds as int8.
    """

    kind: str
    answer: str | None = None
    tool_name: str | None = None
    arguments: dict | None = None
    reason: str | None = None
    # TOOL / OTHER with a call: the text written beside the call(s) ("Let me look that up."),
    # stripped; None when there was none.
    narration: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ACTION_KINDS:
            raise ValueError(
                f"Action.kind={self.kind!r}: expected one of {', '.join(ACTION_KINDS)}"
            )
        allowed = {OTHER: OTHER_REASONS, TRUNC: TRUNC_REASONS}.get(self.kind, (None,))
        if self.reason not in allowed:
            raise ValueError(
                f"Action.reason={self.reason!r} does not fit kind {self.kind}; expected one of {allowed}"
            )
