"""The splice workload of `nudge bench` (and of the benchmarks, benchmarks/benchkit/splice_runs.py):
`splice_workload` gives one long real prefix (the shipped MuSiQue sample's paragraphs) and N
short real suffixes; `hf_generate` is the per-arm HF baseline, through HF's greedy reference
(reference.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from nudgeability.models.testing.reference import hf_greedy
from nudgeability.splice.tasks import MusiqueTask

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
    "Something in this chain of reasoning does not add up, and I should check it with the tool "
    "before answering.",
    "Okay.",
    "Looking at it once more, the two paragraphs seem to agree with each other.",
    "Before answering, let me consider whether the retrieval helper could find a more relevant "
    "paragraph.",
]


@dataclass
class SpliceWorkload:
    prefix: list[int]
    suffixes: list[list[int]]


def musique_text() -> str:
    """Paragraphs of the shipped MuSiQue sample, as one long reading-comprehension context."""
    path = MusiqueTask().default_data_path()
    parts = []
    for line in path.read_text().splitlines()[:20]:
        row = json.loads(line)  # a line of the data file, not a run record
        parts += [f"{p['title']}: {p['paragraph_text']}" for p in row["paragraphs"]]
    return "\n\n".join(parts)


def splice_workload(
    tokenizer, prefix_tokens: int = 1024, arms: int = 12, min_suffix: int = 10, max_suffix: int = 30
) -> SpliceWorkload:
    """A `prefix_tokens`-token prefix of real text and `arms` suffixes of `min_suffix`..`max_suffix`
    tokens, spread over the whole range."""
    ids = tokenizer(musique_text())["input_ids"]
    if len(ids) < prefix_tokens:
        ids = ids * (prefix_tokens // len(ids) + 1)
    suffixes = []
    for i in range(arms):
        text = " " + " ".join(SENTENCES[(i + k) % len(SENTENCES)] for k in range(4))
        want = min_suffix + (i * 13) % (max_suffix - min_suffix + 1)
        suffixes.append(tokenizer(text)["input_ids"][:want])
    return SpliceWorkload(prefix=ids[:prefix_tokens], suffixes=suffixes)


def hf_generate(model, ids: list[int], new: int) -> list[int]:
    """`new` greedy tokens after `ids`, EOS suppressed (`min_new_tokens`): the per-arm baseline
    of `nudge bench` and the benchmarks; no logits are kept, as a plain `generate()` keeps none."""
    return hf_greedy(model, ids, new, min_new_tokens=new, logits=False).tokens
