"""Where else a base's reasoning is cut: `nudge run --cuts`.

The paper cuts B's reasoning once, just before its first think-close (splice/README.md *The
cut*). `--cuts` adds more cuts of the same reasoning, each forked with every arm asked for:

- `all`: after every sentence but the last (the paper's cut already follows the last);
- `0.25,0.5,0.75`: at those fractions of the reasoning's length in tokens (each strictly between 0
  and 1), rounded to the nearest token and kept within the reasoning;
- `sentences:3,7`: after the 3rd and the 7th sentence (counted from 1; a count the reasoning does
  not reach gives no cut).

A cut is an index into the base's generated ids, so it always falls on a token boundary of what
the model wrote; nothing is tokenised again. Sentences are found on the decoded reasoning by the
rule of splice/experiment/sentence_split.py, and the cut after a sentence is the index of the
token that holds the next sentence's first character (as the cut before the think-close is the
token in which the marker begins). Cuts are kept strictly inside the reasoning (0 < cut <
boundary) and distinct; a fraction that rounds onto a cut already made adds nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nudgeability.splice.experiment.sentence_split import sentence_chars, token_holding

KINDS = ("all", "fractions", "sentences")


class CutsError(ValueError):
    """A `--cuts` value that cannot be read."""


@dataclass(frozen=True)
class CutSpec:
    """A parsed `--cuts` value: `kind` in KINDS, and the fractions or sentence counts."""

    kind: str
    values: tuple[float, ...] | tuple[int, ...] = ()

    def __str__(self) -> str:
        """The canonical spelling, as the manifest records it."""
        if self.kind == "all":
            return "all"
        if self.kind == "sentences":
            return "sentences:" + ",".join(str(v) for v in self.values)
        return ",".join(repr(v) for v in self.values)


def parse_cuts(text: str) -> CutSpec:
    """The `CutSpec` of a `--cuts` value; `CutsError` saying what is wrong with it."""
    text = text.strip()
    if text == "all":
        return CutSpec("all")
    if text.startswith("sentences:"):
        counts = []
        for part in text.removeprefix("sentences:").split(","):
            if not part.strip().isdigit() or int(part) < 1:
                raise CutsError(
                    f"--cuts {text!r}: sentence count {part!r} is not a whole number ≥ 1"
                )
            counts.append(int(part))
        return CutSpec("sentences", tuple(sorted(set(counts))))
    fractions = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise CutsError(
                f"--cuts {text!r}: {part!r} is not a fraction; give all, fractions such as "
                "0.25,0.5 or sentences:3,7"
            ) from None
        if not (0.0 < value < 1.0) or math.isnan(value):
            raise CutsError(f"--cuts {text!r}: fraction {part} is not strictly between 0 and 1")
        fractions.append(value)
    return CutSpec("fractions", tuple(sorted(set(fractions))))


def sentence_cuts(ids: Sequence[int], decode: Callable[[list[int]], str]) -> list[int]:
    """The index of the token holding each sentence's first character, for every sentence after
    the first: the cut after sentence k is the k-th of these (ascending, distinct, each > 0)."""
    ids = list(ids)
    if not ids:
        return []
    cuts = []
    for target in sentence_chars(decode(ids))[1:]:
        i = token_holding(ids, decode, target)
        if i > 0 and (not cuts or i > cuts[-1]):
            cuts.append(i)
    return cuts


def cut_positions(
    spec: CutSpec | None, reasoning: Sequence[int], decode: Callable[[list[int]], str]
) -> list[int]:
    """The extra cuts of one base's `reasoning` (its ids before the think-close): ascending
    indices, each strictly inside it. None or an empty reasoning gives none."""
    boundary = len(reasoning)
    if spec is None or boundary < 2:
        return []
    if spec.kind == "fractions":
        found = {min(boundary - 1, max(1, round(f * boundary))) for f in spec.values}
        return sorted(found)
    after = sentence_cuts(reasoning, decode)
    if spec.kind == "all":
        return after
    return [after[k - 1] for k in spec.values if k <= len(after)]
