"""Generic ChatML (SmolLM2 and other models with no think or tool format of their own).

Turns are `<|im_start|>{role}\\n…<|im_end|>\\n`, as SmolLM2's own template writes them for every role
(models/families/templates/smollm2.jinja), a tool result included: `<|im_start|>tool\\n…<|im_end|>`.
Thinking and tool calls are written as plain text,
Qwen3-style: `<think>…</think>`, then a final answer or
`<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>`. The markers usually span several
tokens (SmolLM2 spells `</think>` as `</`, `think`, `>`).

Because the model was never trained on this format, the system turn always states it in plain
text (the tools block, then a `# Format` section), and the generation prompt opens the thinking
block, `<|im_start|>assistant\\n<think>\\n`, so that even a non-reasoning model starts inside it.
For the same reason this family always uses its own renderer, never the checkpoint's template:
a ChatML checkpoint's template knows nothing of this think/tool format. And because a small model
follows a shown pattern far more readily than a described one, `demonstrations` gives two worked
exchanges (a direct answer, and a call of the first declared tool) that the runner places before
the real question: without them SmolLM2-135M-Instruct (greedy, on StrategyQA prompts) does not
close its thinking, with them it does. They are the same in every condition, so
the paired comparisons are unaffected.

Splice: "\\n" + sentence + "\\n", then the (multi-token) `</think>` ids when sealed.
"""

from __future__ import annotations

from nudgeability.models.families.qwen3 import TOOLS_HEADER, Qwen3Family, render_tool_call, tojson

FORMAT_WITH_TOOLS = (
    "\n</tools>\n\n# Format\n\nFirst think step by step between <think> and </think>. After </think>, do one of "
    "two things: write your final answer, or call a function by returning a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
FORMAT_WITHOUT_TOOLS = "# Format\n\nFirst think step by step between <think> and </think>. After </think>, write your final answer."


def _generation_prompt(thinking: bool) -> str:
    """The assistant header: SmolLM2's `<|im_start|>assistant\\n`, then this family's think opener
    (and, with thinking off, an empty block)."""
    return "<|im_start|>assistant\n<think>\n" + ("" if thinking else "\n</think>\n\n")


class ChatMLFamily(Qwen3Family):
    """Qwen3's markers, stop texts and call syntax (inherited), with its own rendering of prompts
    and tool results."""

    name = "chatml"
    commitment_gap = "\n"  # as `demonstrations` show it: `</think>\nAnswer: yes`

    def _template_renders_tools(self) -> bool:
        return False  # see the module docstring: the format must be stated by our own renderer

    def own_text(
        self, messages: list[dict], tools: list[dict] | None = None, thinking: bool = True
    ) -> str:
        """The generic ChatML format with the think/tool instructions in the system turn."""
        system = messages[0]["content"] if messages[0]["role"] == "system" else ""
        out = ["<|im_start|>system\n" + (system + "\n\n" if system else "")]
        if tools:
            out.append(TOOLS_HEADER + "".join("\n" + tojson(t) for t in tools) + FORMAT_WITH_TOOLS)
        else:
            out.append(FORMAT_WITHOUT_TOOLS)
        out.append("<|im_end|>\n")
        for i, message in enumerate(messages):
            role, content = message["role"], message["content"]
            if role == "user" or (role == "system" and i > 0):
                out.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
            elif role == "assistant":
                calls = [render_tool_call(c) for c in message.get("tool_calls") or ()]
                out.append(
                    "<|im_start|>assistant\n"
                    + "\n".join([content] * bool(content) + calls)
                    + "<|im_end|>\n"
                )
            elif role in ("tool", "observation"):
                out.append(f"<|im_start|>tool\n{content}<|im_end|>\n")
        out.append(_generation_prompt(thinking))
        return "".join(out)

    def render_tool_result(self, name: str, result: str, thinking: bool = True) -> str:
        """`<|im_end|>`, the result as a `tool` turn exactly as SmolLM2's ChatML template renders
        a tool message (the role and the text, nothing added), then this family's assistant header,
        which opens the thinking block. The tool is not named, as in Qwen3."""
        return (
            "<|im_end|>\n<|im_start|>tool\n"
            + result
            + "<|im_end|>\n"
            + _generation_prompt(thinking)
        )

    def demonstrations(self, tools: list[dict] | None = None) -> list[dict]:
        """A direct answer, then (when a tool is declared) a call of the first tool, in this format."""
        shown = [
            {"role": "user", "content": "Question: Is the Eiffel Tower in Paris?"},
            {
                "role": "assistant",
                "content": "<think>\nThe Eiffel Tower is a landmark in Paris. I am sure of this.\n</think>\nAnswer: yes",
            },
        ]
        if tools:
            function = tools[0].get("function", tools[0])
            params = list((function.get("parameters") or {}).get("properties") or {"query": None})
            question = "Who was the mayor of Springfield, Illinois in 1931?"
            call = {"name": function["name"], "arguments": {params[0]: question}}
            shown += [
                {"role": "user", "content": f"Question: {question}"},
                {
                    "role": "assistant",
                    "content": "<think>\nI do not know this, so I will use the tool.\n</think>",
                    "tool_calls": [call],
                },
            ]
        return shown
