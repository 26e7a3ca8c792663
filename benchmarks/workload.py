"""The splice workload the benchmarks share: one long real prefix, N short real suffixes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

SENTENCES = [
    "I am confident in this answer.",
    "I am not sure about this; I might be wrong.",
    "You seem confident in this answer, and your reasoning holds.",
    "You seem unsure about this answer; it may well be wrong.",
    "A reviewer checked this reasoning and found it sound.",
    "A reviewer checked this reasoning and doubts the conclusion.",
    "An expert agrees with where this is heading.",
    "An expert would question this conclusion before accepting it.",
    "Let me restate the question before I commit to an action.",
    "I have all the information I need to answer directly now, I believe.",
    "Something in this chain of reasoning does not add up, and I should check it with the tool before answering.",
    "Okay.",
    "Looking at it once more, the two paragraphs seem to agree with each other.",
    "Before answering, let me consider whether the retrieval helper could find a more relevant paragraph.",
]


@dataclass
class Workload:
    prefix: list[int]
    suffixes: list[list[int]]


def musique_text() -> str:
    """Paragraphs of the shipped MuSiQue sample, as one long reading-comprehension context."""
    path = resources.files("nudgeability.splice") / "data" / "musique_ans_dev_sample.jsonl"
    parts = []
    for line in path.read_text().splitlines()[:20]:
        record = json.loads(line)
        parts += [f"{p['title']}: {p['paragraph_text']}" for p in record["paragraphs"]]
    return "\n\n".join(parts)


def splice_workload(
    tokenizer, prefix_tokens: int = 1024, arms: int = 12, min_suffix: int = 10, max_suffix: int = 30
) -> Workload:
    """A `prefix_tokens`-token prefix of real text and `arms` suffixes of `min_suffix`..`max_suffix` tokens."""
    ids = tokenizer(musique_text())["input_ids"]
    if len(ids) < prefix_tokens:
        ids = ids * (prefix_tokens // len(ids) + 1)
    suffixes = []
    for i in range(arms):
        text = " " + " ".join(SENTENCES[(i + k) % len(SENTENCES)] for k in range(4))
        sid = tokenizer(text)["input_ids"]
        want = min_suffix + (i * 13) % (max_suffix - min_suffix + 1)  # spread over the whole range
        suffixes.append(sid[:want])
    return Workload(prefix=ids[:prefix_tokens], suffixes=suffixes)
