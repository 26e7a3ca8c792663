"""Tiny tokenizers for each model family, built in-process with the `tokenizers` library.

Each is a byte-level BPE (every byte is a token, so any text encodes) trained on a fixed corpus,
so the result is deterministic. It carries its family's special tokens and a chat template written
to the documented format (models/families/templates/), and has at most 320 tokens, so that its ids
fit `nudgeability.models.testing.tiny.tiny_model(arch, vocab_size=320)`. Pairings and ids:

| family | tiny arch | ids 0, 1, 2 | eos (what the family stops on) |
|---|---|---|---|
| qwen3  | qwen3  | <|endoftext|>, <|im_start|>, <|im_end|> | <|im_end|> (pad <|endoftext|>), as in Qwen3 |
| glm_z1 | glm4   | <pad>, <|endoftext|>, [MASK]             | <|endoftext|> = 1 = tiny glm4 eos; pad 0 = tiny glm4 pad |
| gemma4 | gemma4 | <pad>, <eos>, <bos>                       | <eos> = 1, bos 2, pad 0, as in Gemma and tiny gemma4 |
| chatml | llama  | <|endoftext|>, <|im_start|>, <|im_end|> | <|im_end|> = 2 = tiny llama eos, bos 1, as in SmolLM2 |

Markers that are single tokens in the real vocabularies are single tokens here. GLM-Z1's
`<think>`/`</think>` are deliberately not (unverified for the real Z1), nor are ChatML's plain-text
`<think>` and `<tool_call>` tags, so both multi-token paths are exercised.

The tokenizers are cached and shared: do not mutate one (deep-copy it first).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

MAX_VOCAB = 320

# Training text: enough repeated words and JSON that BPE learns a few dozen useful merges.
_CORPUS = (
    "The user asks a question and the assistant thinks step by step before it answers.",
    "Let me think about the question. The answer is in the paragraph about the river and the city.",
    "I am confident that my answer is correct. I am not sure, so I should check with the tool.",
    "retrieve the most relevant paragraph for a query; search for evidence; ask the expert.",
    '{"name": "retrieve", "arguments": {"query": "who wrote the book"}}',
    "<think>\nThe question asks who wrote the book. I think the answer is the author.\n</think>\n\nThe author.",
    "<tool_call>\nfunction name and arguments\n</tool_call>",
    "description parameters properties required type string object query",
)


@dataclass(frozen=True)
class _Spec:
    special: tuple[str, ...]  # special tokens, given ids 0.. in this order
    added: tuple[str, ...]  # single-token markers that are not special (as in the real vocabulary)
    template: str  # file under models/families/templates/
    eos: str
    pad: str
    bos: str | None = None
    unk: str | None = None


_SPECS = {
    "qwen3": _Spec(
        special=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        added=(
            "<think>",
            "</think>",
            "<tool_call>",
            "</tool_call>",
            "<tool_response>",
            "</tool_response>",
        ),
        template="qwen3.jinja",
        eos="<|im_end|>",
        pad="<|endoftext|>",
    ),
    "glm_z1": _Spec(
        special=(
            "<pad>",
            "<|endoftext|>",
            "[MASK]",
            "[gMASK]",
            "[sMASK]",
            "<sop>",
            "<eop>",
            "<|system|>",
            "<|user|>",
            "<|assistant|>",
            "<|observation|>",
        ),
        added=(),
        template="glm_z1.jinja",
        eos="<|endoftext|>",
        pad="<pad>",
    ),
    "gemma4": _Spec(
        special=(
            "<pad>",
            "<eos>",
            "<bos>",
            "<|turn>",
            "<turn|>",
            "<|think|>",
            "<|channel>",
            "<channel|>",
            "<|tool>",
            "<tool|>",
            "<|tool_call>",
            "<tool_call|>",
            "<|tool_response>",
            "<tool_response|>",
            '<|"|>',
        ),
        added=(),
        template="gemma4_e2b.jinja",
        eos="<eos>",
        pad="<pad>",
        bos="<bos>",
    ),
    "chatml": _Spec(
        special=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        added=(),
        template="chatml.jinja",
        eos="<|im_end|>",
        pad="<|im_end|>",
        bos="<|im_start|>",
        unk="<|endoftext|>",
    ),
}
TINY_FAMILIES = tuple(_SPECS)


def chat_template(file_name: str) -> str:
    """Text of a bundled template under models/families/templates/."""
    return (
        resources.files("nudgeability.models.families")
        .joinpath("templates", file_name)
        .read_text(encoding="utf-8")
    )


@functools.cache
def tiny_tokenizer(family: str) -> PreTrainedTokenizerFast:
    """A deterministic byte-level BPE tokenizer of at most 320 tokens for `family` (see module doc)."""
    if family not in _SPECS:
        raise ValueError(
            f"unknown tiny tokenizer family {family!r}; known: {', '.join(TINY_FAMILIES)}"
        )
    spec = _SPECS[family]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=MAX_VOCAB - len(spec.added),
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in spec.special],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(_CORPUS) * 4, trainer=trainer)
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in spec.added])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=spec.eos,
        pad_token=spec.pad,
        bos_token=spec.bos,
        unk_token=spec.unk,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = chat_template(spec.template)
    return tokenizer
