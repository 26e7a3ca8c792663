"""What every chat/think/tool format provides, and the machinery the formats share.

A `Family` wraps one tokenizer and knows one format (models/README.md): how to render a prompt
that declares tools, which marker closes the thinking block, where to cut the reasoning, what to
append at the cut, and how to read the committed action after the final think-close.

Boundaries and splices work on token ids. Markers are searched in the per-token decoded text, so a
marker is found whether the vocabulary holds it as one token (Qwen3 `</think>`) or spells it with
several (SmolLM2 `<`, `/think`, `>`, or ` </` + `think` + `>` when a space merged into the first
piece). The boundary is the index of the token in which the marker's first character lies.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from nudgeability.models.families.action import (
    BUDGET_AFTER_THINK,
    BUDGET_IN_ANSWER,
    BUDGET_IN_THINKING,
    BUDGET_IN_TOOL_CALL,
    BUDGET_SPENT,
    CALL_AND_ANSWER,
    CALL_OUTSIDE_FORMAT,
    EMPTY_COMMITMENT,
    OTHER,
    SELF,
    THINK_NEVER_CLOSED,
    THINK_REOPENED,
    TOOL,
    TRUNC,
    UNDECLARED_TOOL,
    UNPARSABLE_ARGUMENTS,
    Action,
)
from nudgeability.models.families.calls import json_call_outside_format
from nudgeability.models.families.messages import FamilyError, check_messages, tool_names

# A throwaway tool used only to ask a checkpoint's template whether it renders tools at all.
_PROBE_TOOL_NAME = "nudgeability_probe_tool"
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": _PROBE_TOOL_NAME,
        "description": "probe",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
}


@dataclass
class ParsedCall:
    """One tool call found after the think-close. `name`/`arguments` are None when unreadable."""

    name: str | None
    arguments: dict | None
    end: int | None = None  # offset in the scanned text just past the call; None if never closed


@dataclass
class CallScan:
    """The tool calls in a commitment text and what is left around them."""

    calls: list[ParsedCall] = field(default_factory=list)
    residual: str = ""  # the text outside every call
    open_call: bool = (
        False  # a call was opened and never closed; its body ran to the end of the text
    )


class Family:
    """One chat/think/tool format bound to a tokenizer.

    Subclasses set the class attributes and implement `own_text` (the family's renderer, used when
    the checkpoint's template does not render tools) and `scan_calls` (finding tool calls).
    """

    name: ClassVar[str] = ""
    think_open_text: ClassVar[str] = "<think>"
    think_close_text: ClassVar[str] = "</think>"
    # Texts that stop generation: end of turn, EOS, end of a tool call. Each becomes a stop token id
    # when this vocabulary holds it as one token, else a stop string.
    stop_texts: ClassVar[tuple[str, ...]] = ()
    # Texts that end the assistant's turn when the commitment is read back.
    end_of_turn_texts: ClassVar[tuple[str, ...]] = ()
    # The inserted sentence becomes its own paragraph: separator + sentence + suffix. A newline on
    # each side joins cleanly to any reasoning prefix (which ends on a token boundary) and leaves the
    # think-close at the start of a line, as the families write it natively.
    separator: ClassVar[str] = "\n"
    sentence_suffix: ClassVar[str] = "\n"
    # What the family writes between the think-close and the committed action, and what a tool
    # call opens with: the openers whose probability right after the close a run can score
    # (`action_opener`, `nudge run --likelihoods`).
    commitment_gap: ClassVar[str] = "\n\n"
    call_open_text: ClassVar[str] = "<tool_call>"

    def __init__(self, tokenizer, config: dict | None = None) -> None:
        """`config` is the checkpoint's config.json as a dict, when known; a family that needs it
        to choose between template variants reads it (Gemma 4)."""
        self.tokenizer = tokenizer
        self.think_open_ids: list[int] = self.encode(self.think_open_text)
        self.think_close_ids: list[int] = self.encode(self.think_close_text)
        stop_ids: list[int] = []
        stop_strings: list[str] = []
        for text in self.stop_texts:
            token_id = self.single_token_id(text)
            if token_id is None:
                stop_strings.append(text)
            elif token_id not in stop_ids:
                stop_ids.append(token_id)
        eos = tokenizer.eos_token_id
        for token_id in eos if isinstance(eos, list) else [eos]:
            if token_id is not None and token_id not in stop_ids:
                stop_ids.append(token_id)
        self.stop_token_ids: list[int] = stop_ids
        self.stop_strings: list[str] = stop_strings
        self.uses_checkpoint_template: bool = self._template_renders_tools()

    # ----- tokens ---------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of `text` alone, with no BOS or other added special tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        """Text of `ids`, special tokens kept, no clean-up of spaces."""
        return self.tokenizer.decode(
            list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    def single_token_id(self, text: str) -> int | None:
        """The id of `text` if this vocabulary holds it as exactly one token, else None."""
        ids = self.encode(text)
        return ids[0] if len(ids) == 1 and self.decode(ids) == text else None

    def find_marker(self, ids: list[int], marker: str, last: bool = False) -> int | None:
        """Index of the token in which the first (or last) occurrence of `marker` starts, or None."""
        ids = list(ids)
        if not ids:
            return None
        pieces = self.tokenizer.decode(
            [[i] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
        starts, offset = [], 0
        for piece in pieces:
            starts.append(offset)
            offset += len(piece)
        text = "".join(pieces)
        pos = text.rfind(marker) if last else text.find(marker)
        if pos < 0:
            return None
        return bisect.bisect_right(starts, pos) - 1

    # ----- prompts --------------------------------------------------------------------------
    def render(
        self, messages: list[dict], tools: list[dict] | None = None, thinking: bool = True
    ) -> list[int]:
        """Prompt ids for `messages` (+ `tools`), ending with the generation prompt.

        Uses the tokenizer's own chat template when it renders tools, else `own_text`. The text is
        tokenised with no added special tokens (the format writes its own BOS), so the same input
        always gives the same ids.
        """
        return self.encode(self.render_text(messages, tools, thinking))

    def render_text(
        self, messages: list[dict], tools: list[dict] | None = None, thinking: bool = True
    ) -> str:
        """The prompt text that `render` tokenises."""
        check_messages(messages, tools)
        if self.uses_checkpoint_template:
            return self.tokenizer.apply_chat_template(
                messages,
                tools=tools or None,
                add_generation_prompt=True,
                tokenize=False,
                enable_thinking=thinking,
            )
        return self.own_text(messages, tools, thinking)

    def own_text(
        self, messages: list[dict], tools: list[dict] | None = None, thinking: bool = True
    ) -> str:
        """The family's own renderer, following the format documented in models/README.md."""
        raise NotImplementedError

    def demonstrations(self, tools: list[dict] | None = None) -> list[dict]:
        """Worked exchanges to place before the real question, in this family's format.

        None for a family the model was trained on: its native format needs no demonstration.
        """
        return []

    def _template_renders_tools(self) -> bool:
        """Whether the tokenizer ships a chat template that renders a declared tool."""
        if not getattr(self.tokenizer, "chat_template", None):
            return False
        try:
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": "hi"}],
                tools=[_PROBE_TOOL],
                add_generation_prompt=True,
                tokenize=False,
            )
        except Exception:  # noqa: BLE001 - any template failure means "cannot use it for tools"
            return False
        return isinstance(text, str) and _PROBE_TOOL_NAME in text

    # ----- the splice -----------------------------------------------------------------------
    def find_boundary(self, generated_ids: list[int]) -> int | None:
        """Index in `generated_ids` where the first think-close starts; None if it never closed."""
        return self.find_marker(generated_ids, self.think_close_text)

    def splice_ids(self, sentence: str, sealed: bool) -> list[int]:
        """Ids to append to prompt + generated[:boundary]: separator + sentence + suffix, then the
        think-close ids when `sealed`. An empty sentence inserts nothing (only the close if sealed).
        The sentence is tokenised on its own, never together with the reasoning before it."""
        if not isinstance(sentence, str):
            raise FamilyError(f"splice_ids: sentence must be a str, got {type(sentence).__name__}")
        ids = self.encode(self.separator + sentence + self.sentence_suffix) if sentence else []
        return ids + (list(self.think_close_ids) if sealed else [])

    def call_opener(self, tool_name: str) -> str:
        """The text a call of `tool_name` begins with (the wrapper's opening tag; a family whose
        calls have no wrapper begins them with the name)."""
        return self.call_open_text

    def action_opener(self, opener: str) -> list[int]:
        """Ids of the gap after the think-close and then `opener` (a call's opening, or a task's
        answer label), tokenised on their own as a splice is: the tokens whose probability right
        after the close is that of the action they open, in this one tokenisation."""
        return self.encode(self.commitment_gap + opener)

    # ----- the action -----------------------------------------------------------------------
    def scan_calls(self, text: str) -> CallScan:
        """Tool calls in the commitment `text` (what follows the final think-close)."""
        raise NotImplementedError

    def parse_action(
        self,
        ids: list[int],
        finish_reason: str,
        tools: list | None = None,
        is_answer: Callable[[str], bool] | None = None,
    ) -> Action:
        """The action committed after the final think-close in `ids`.

        `ids` is what follows the cut: for B, generated[boundary:]; for an arm, splice ids + the
        arm's generation. `tools` are the declared tool names (or tool dicts); None declares none.
        `is_answer(text)` says whether text holds an answer in the task's answer format (the task
        supplies it: `Task.holds_answer`); without it no text counts as an answer beside a call.
        The turn counts as ended when `finish_reason` (one of the engine's, engine/sequence.py
        FINISH_REASONS) is not "length" (`BUDGET_SPENT`) or an end-of-turn marker
        follows the close. Reading order (models/README.md, "Actions"): no close -> TRUNC/OTHER;
        a think block reopened and not closed -> TRUNC/OTHER; calls -> OTHER(call_and_answer) when
        the text beside them holds an answer, OTHER when a name is not declared or a call cannot be
        read, else TOOL (the first call), keeping the text beside it as `narration`; a declared
        tool's call written as JSON outside the call syntax -> OTHER(call_outside_format); other
        text -> SELF; nothing -> OTHER (ended) or TRUNC.
        """
        if not isinstance(finish_reason, str) or not finish_reason:
            raise FamilyError(
                f"finish_reason={finish_reason!r}: expected the engine's finish reason, a string"
            )
        declared = tool_names(tools)
        text = self.decode(ids)
        close = text.rfind(self.think_close_text)
        truncated = finish_reason == BUDGET_SPENT
        if close < 0:
            return (
                Action(TRUNC, reason=BUDGET_IN_THINKING)
                if truncated
                else Action(OTHER, reason=THINK_NEVER_CLOSED)
            )
        tail = text[close + len(self.think_close_text) :]
        ends = [p for p in (tail.find(m) for m in self.end_of_turn_texts) if p >= 0]
        if ends:
            tail = tail[: min(ends)]
        ended = bool(ends) or not truncated
        if self.think_open_text in tail:
            return (
                Action(OTHER, reason=THINK_REOPENED)
                if ended
                else Action(TRUNC, reason=BUDGET_IN_THINKING)
            )
        scan = self.scan_calls(tail)
        if scan.open_call and not ended:
            return Action(TRUNC, reason=BUDGET_IN_TOOL_CALL)
        residual = scan.residual.strip()
        answered = bool(residual) and is_answer is not None and is_answer(residual)
        if scan.calls:
            first, narration = scan.calls[0], residual or None
            if answered:
                return Action(
                    OTHER, tool_name=first.name, reason=CALL_AND_ANSWER, narration=narration
                )
            for call in scan.calls:
                if call.name is None:
                    return Action(OTHER, reason=UNPARSABLE_ARGUMENTS, narration=narration)
                if call.name not in declared:
                    return Action(
                        OTHER, tool_name=call.name, reason=UNDECLARED_TOOL, narration=narration
                    )
                if call.arguments is None:
                    return Action(
                        OTHER, tool_name=call.name, reason=UNPARSABLE_ARGUMENTS, narration=narration
                    )
            return Action(
                TOOL, tool_name=first.name, arguments=first.arguments, narration=narration
            )
        if residual:
            if not ended:
                return Action(TRUNC, reason=BUDGET_IN_ANSWER)
            outside = json_call_outside_format(residual, declared)
            if outside is not None:
                reason = CALL_AND_ANSWER if answered else CALL_OUTSIDE_FORMAT
                return Action(OTHER, tool_name=outside, reason=reason, narration=residual)
            return Action(SELF, answer=residual)
        return (
            Action(OTHER, reason=EMPTY_COMMITMENT)
            if ended
            else Action(TRUNC, reason=BUDGET_AFTER_THINK)
        )

    # ----- a tool call written back (the chat backend) ----------------------------------------
    def render_tool_call(self, call: dict) -> str:
        """One assistant tool call, an OpenAI `tool_calls` entry (`{"function": {"name",
        "arguments"}}`), as this family writes it in its own turn: how backends/chat.py writes a
        chat answer's calls back into the family's text. A family that does not override it is
        refused for `--api chat` (`writes_tool_calls`)."""
        raise NotImplementedError(f"the {self.name} family does not write tool calls back")

    @classmethod
    def writes_tool_calls(cls) -> bool:
        """Whether `render_tool_call` is this family's own (so chat answers can be written back)."""
        return cls.render_tool_call is not Family.render_tool_call

    # ----- tool results (the resolution phase) ------------------------------------------------
    def render_tool_result(self, name: str, result: str, thinking: bool = True) -> str:
        """The text the real chat template writes after a tool call, up to the model's next turn.

        It starts right after the call's closing text (`</tool_call>`, `<tool_call|>`, or GLM's
        closing `}`) and holds: the end of the assistant turn, the tool-result turn carrying
        `result` for the tool called `name`, and the header of the model's next turn, exactly as
        the template renders `[..., assistant with the call, tool result]` with
        `add_generation_prompt=True` and this `thinking` setting. models/README.md ("Tool
        results") shows it per family.
        """
        raise NotImplementedError

    def call_end(self, ids: list[int]) -> tuple[int, str] | None:
        """Where the first complete tool call after the final think-close in `ids` ends.

        Returns `(k, rest)`: `ids[:k]` are the whole tokens that end at or before the call's last
        character, and `rest` is the call text that lies in token `k` when the call ends inside it
        (usually ""). None when `ids` hold no complete call after a think-close.
        """
        ids = list(ids)
        text = self.decode(ids)
        close = text.rfind(self.think_close_text)
        if close < 0:
            return None
        start = close + len(self.think_close_text)
        calls = [c for c in self.scan_calls(text[start:]).calls if c.end is not None]
        if not calls:
            return None
        end = start + calls[0].end
        pieces = self.tokenizer.decode(
            [[i] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
        offset = 0
        for k, piece in enumerate(pieces):
            if offset + len(piece) > end:
                return k, text[offset:end]
            offset += len(piece)
        return len(ids), ""

    def continuation_ids(
        self, ids: list[int], name: str, result: str, thinking: bool = True
    ) -> list[int]:
        """`ids` cut just after their first complete tool call, then the tool-result turn and the
        next turn's header (`render_tool_result`), as ids: the prompt of a resolution, to be put
        after whatever preceded `ids`. A call that ends inside a token keeps its own text re-encoded.
        Raises FamilyError when `ids` hold no complete call."""
        found = self.call_end(ids)
        if found is None:
            raise FamilyError("continuation_ids: no complete tool call after the think-close")
        k, rest = found
        return list(ids[:k]) + self.encode(rest + self.render_tool_result(name, result, thinking))
