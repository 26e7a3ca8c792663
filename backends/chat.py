"""The chat-continuation backend, for provider APIs that speak only `/v1/chat/completions` but can
continue a partial assistant turn.

A base (NT, B, oracle_B) is an ordinary chat request: the problem's messages, with the task's
tool declared for B and oracle_B. The answer's reasoning (`reasoning_content`, or a think block
inside `content`) and its content and tool calls are written back in the family's own format
(reasoning, think-close, then the commitment), and encoded with the family's tokenizer, so the
records look like a local run's and the family reads the action the same way.

An arm sends the same messages plus one assistant message holding B's reasoning up to the cut and
the inserted sentence, marked to be continued: vLLM's `continue_final_message` (with
`add_generation_prompt: false`), or a provider's prefix-completion flag (`"prefix": true` on the
message, as DeepSeek's beta API takes it). The server's own chat template re-renders that prefix,
so the continuation is chat-level: neither the prompt's ids nor the cut's are the protocol's.

The runner hands a backend token ids; this backend maps each prompt's ids back to the messages
and tools they were rendered from (`Conversation`), which `prepare` registers.
"""

from __future__ import annotations

from dataclasses import dataclass

from nudgeability.backends.base import RemoteCompletion
from nudgeability.backends.http_backend import HttpBackend
from nudgeability.backends.http_client import HttpClient
from nudgeability.backends.names import CONTINUE_FLAGS
from nudgeability.engine import SamplingParams
from nudgeability.models.families import FAMILIES, Family

# the families that write a chat answer's tool calls back in their own format
# (`Family.render_tool_call`)
CHAT_FAMILIES = tuple(sorted(name for name, cls in FAMILIES.items() if cls.writes_tool_calls()))


@dataclass(frozen=True)
class Conversation:
    """What one prompt was rendered from: the chat messages and the declared tools (or None)."""

    messages: tuple[dict, ...]
    tools: tuple[dict, ...] | None


class ChatBackend(HttpBackend):
    """A backend over `/v1/chat/completions` (see the module docstring)."""

    api = "chat"
    path = "chat/completions"
    continuation = "chat"

    def __init__(
        self,
        client: HttpClient,
        family: Family,
        *,
        continue_flag: str = "continue_final_message",
        served_model: str | None = None,
        progress: bool = False,
    ):
        if continue_flag not in CONTINUE_FLAGS:
            raise ValueError(
                f"--chat-continue {continue_flag!r}: expected one of {', '.join(CONTINUE_FLAGS)}"
            )
        self.continue_flag = continue_flag
        self.conversations: dict[tuple[int, ...], Conversation] = {}
        super().__init__(client, family, served_model=served_model, progress=progress)

    def describe(self) -> dict:
        return {**super().describe(), "chat_continue": self.continue_flag}

    def register(self, prompt_ids, conversation: Conversation) -> None:
        """Say which messages and tools `prompt_ids` were rendered from."""
        self.conversations[tuple(prompt_ids)] = conversation

    def _split(self, ids: list[int]) -> tuple[Conversation, list[int]]:
        """The registered prompt that `ids` starts with (the longest), and the ids after it."""
        best = None
        for prompt, conversation in self.conversations.items():
            if len(prompt) <= len(ids) and tuple(ids[: len(prompt)]) == prompt:
                if best is None or len(prompt) > len(best[0]):
                    best = (prompt, conversation)
        if best is None:
            raise ValueError("chat backend: a prompt was not registered with its messages")
        return best[1], ids[len(best[0]) :]

    def body(self, ids: list[int], params: SamplingParams) -> dict:
        conversation, after = self._split(ids)
        body = self.sampling_fields(params)
        messages = [dict(m) for m in conversation.messages]
        if conversation.tools:
            body["tools"] = list(conversation.tools)
        if after:  # an arm: continue the assistant turn from the cut
            prefix = {
                "role": "assistant",
                "content": self.family.think_open_text + "\n" + self.family.decode(after),
            }
            if self.continue_flag == "prefix":
                prefix["prefix"] = True
            else:
                body.update(continue_final_message=True, add_generation_prompt=False)
            messages.append(prefix)
        body["messages"] = messages
        return body

    def completion(self, data: dict, ids: list[int], params: SamplingParams) -> RemoteCompletion:
        try:
            choice = data["choices"][0]
            message = choice["message"]
            content = message.get("content") or ""
            if not isinstance(content, str):
                raise TypeError
        except (KeyError, IndexError, TypeError, AttributeError):
            raise self.client._error(self.path, "malformed answer: no choices[0].message") from None
        _, after = self._split(ids)
        if after:  # an arm: the answer continues our prefix
            text = content
        else:
            text = self._base_text(message, content)
        generated = self.family.encode(text)
        finish = "length" if choice.get("finish_reason") == "length" else "eos"
        return self.counted(data, len(ids), generated, finish, None, "chat")

    def _base_text(self, message: dict, content: str) -> str:
        """A base's answer in the family's format, continuing a prompt whose think block is open."""
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        opener, closer = self.family.think_open_text, self.family.think_close_text
        if not reasoning and closer in content:  # the think block came inline
            reasoning, content = content.split(closer, 1)
            reasoning = reasoning.removeprefix(opener)
        calls = [self.family.render_tool_call(call) for call in message.get("tool_calls") or ()]
        commitment = "\n".join([content.strip()] * bool(content.strip()) + calls)
        if reasoning is None:
            return commitment  # no think block at all: the family reads it as never closed
        return f"{reasoning.strip()}\n{closer}\n{commitment}"
