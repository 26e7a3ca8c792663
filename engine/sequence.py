"""Requests, results, and the running state of sequences, their groups and their KV segments."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

from nudgeability.engine.sampling.sampling_params import SamplingParams

# The most prefix segments a group reads: a shared run, the rest of the prompt, a stem.
MAX_SEGMENTS = 3

FINISH_REASONS = ("eos", "stop_token", "stop_string", "length")


@dataclass(frozen=True)
class SequenceRef:
    """A handle to one submitted sequence (`Engine.submit`): name it to `Engine.peek`,
    `Engine.release` or a `ForkRequest`'s `reuse`."""

    id: int


@dataclass
class ForkRequest:
    """One prefix group: a prefix shared by every arm, and one suffix per arm.

    `params` is one `SamplingParams` for every arm, or a list with one per arm.

    `shared` > 0 says that the first `shared` tokens of the prefix are a start that other requests
    may have too (a system prompt, tools, worked examples): they are stored and computed once for
    every live request with the same tokens, and the rest of the prompt continues them. Whether
    another request shares them changes nothing in the results: each request's prefix is computed
    the same way, shared or not. `shared=k` and `shared=0` compute the rest of the prompt on
    different paths (a row continuing the start, or a prefill), so fix `k` from the prompt's
    template, never from what else runs, and replay with the same `k`. With a `stem`, the rest of
    the prompt is computed as part of the stem (so a base's stem to copy starts after the shared
    start, where the base's row does).

    `stem` > 0 says that the last `stem` tokens of the prefix are a base's own generation (with the
    last token of its prompt before them): they are computed as that base computed them, one
    sequence continuing the rest of the prefix, and stored once as a segment of their own. Their
    keys and values are then bitwise those of the base's run, so `reuse` may name the base (a
    `SequenceRef` from `Engine.submit`, running or retained) to copy them from its cache instead of
    computing them again, and a replay that recomputes them gets the same records. `stem = 0`
    prefills the whole prefix in chunks.

    `trunk` > 0 (with a `stem`, `trunk >= stem`) says that the stem is the first `stem` tokens of
    a longer stretch of the same base, `trunk_ids` (exactly `trunk` tokens: the base's last
    prompt token and its next `trunk - 1` generated tokens, so `trunk_ids[:stem]` is the
    prefix's stem). Forks of one base cut at several places then share one trunk instead of a
    stem each: every live fork with the same prompt before the stem, the same `shared` and the
    same `trunk_ids` reads the same trunk run, copied from `reuse` or computed once as the stem
    would be, each fork reading its own first `stem` tokens of it (engine/trunks.py). Where the
    engine is batch-invariant (fp32 on CPU) the arms' bits are those of the same fork with
    `trunk = 0`. With `reuse`, the base must have generated the trunk's tokens already. Only
    the memory changes: the pool holds one trunk, not a stem per fork; a fork that joins a live
    trunk computes none of its prefix (`Completion.shared_prefill_tokens` 0). A fork whose arms
    score their suffixes from the prefix's last position keeps a stem of its own (the trunk
    keeps no hidden state in its middle).
    """

    prefix_ids: list[int]
    suffixes: list[list[int]]
    params: SamplingParams | list[SamplingParams]
    stem: int = 0
    reuse: SequenceRef | None = None
    shared: int = 0
    trunk: int = 0
    trunk_ids: list[int] | None = None


@dataclass
class Completion:
    """The result of one sequence.

    `prefill_tokens` counts the tokens run through the model for this sequence alone (an arm's
    suffix; a `generate` prompt in full; plus any tokens recomputed after a preemption).
    `shared_prefill_tokens` is its group's prefix as computed for the group (0 for `generate`, and
    0 for the parts taken from another sequence's cache). `decode_tokens` counts single-token
    decode forwards (the first new token comes from the prefill). When an arm's suffix is empty,
    the engine moves the prefix's last token into every arm of the group, and the counts say so.
    """

    token_ids: list[int]
    finish_reason: str  # one of FINISH_REASONS
    stop: int | str | None  # the stop token id or stop string that ended it
    prefill_tokens: int
    shared_prefill_tokens: int
    decode_tokens: int
    logits: torch.Tensor | None = None  # [len(token_ids), vocab] fp32, when asked for
    # SamplingParams.token_stats: per new token, its log-probability and the entropy (nats)
    logprobs: list[float] | None = None
    entropies: list[float] | None = None
    hidden: torch.Tensor | None = None  # SamplingParams.return_hidden: [hidden] float16, CPU
    # SamplingParams.score_suffix: log-probability (nats) of each token of the suffix given all
    # before it (the prefix, then the suffix's earlier tokens); [] for an empty suffix
    suffix_logprobs: list[float] | None = None


class Run:
    """A KV segment held in consecutive pool slots: a group's prefix, or a stem.

    `offset` is the position of its first token; `written` counts the tokens whose KV is in the
    pool; `holders` counts the groups that read it (freed when none do and nothing retains it)."""

    __slots__ = (
        "token_ids",
        "offset",
        "start",
        "written",
        "holders",
        "owned",
        "keep_last",
        "last_hidden",
    )

    def __init__(self, token_ids: list[int], offset: int):
        self.token_ids = token_ids
        self.offset = offset
        self.start: int | None = None
        self.written = 0
        self.holders = 0
        self.owned = False  # a group prefills it, or a row computes it
        # A fork whose arms score their suffixes and borrow no prefix token needs the hidden
        # state at the prefix's last position for each arm's first suffix token: the forward that
        # computes this run's last token keeps it here (engine/suffix_scores.py).
        self.keep_last = False
        self.last_hidden: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return len(self.token_ids)

    @property
    def complete(self) -> bool:
        return self.start is not None and self.written == self.length

    @property
    def source(self) -> Run:
        """The run that holds this segment's slots (itself; a `View`'s trunk)."""
        return self


class View:
    """The first `length` tokens of a trunk run (engine/trunks.py), read by a group as a segment
    of its own: the same pool slots, positions and token ids as the trunk's first `length`, so
    the attention sees the shape a stem of `length` tokens would have. It holds no slots itself:
    a group that reads it holds its trunk (`source`), which goes back to the pool when no group
    reads any view of it."""

    __slots__ = ("source", "length")

    owned = True  # never prefilled by a reader: the trunk's own row computes (or copies) it
    keep_last = False
    last_hidden = None

    def __init__(self, trunk: Run, length: int):
        if not 0 < length <= trunk.length:
            raise ValueError(f"a view of {length} tokens of a trunk of {trunk.length}")
        self.source = trunk
        self.length = length

    @property
    def token_ids(self) -> list[int]:
        return self.source.token_ids[: self.length]

    @property
    def offset(self) -> int:
        return self.source.offset

    @property
    def start(self) -> int | None:
        return self.source.start

    @property
    def written(self) -> int:
        return min(self.source.written, self.length)

    @property
    def complete(self) -> bool:
        return self.source.start is not None and self.source.written >= self.length


def sources(segments) -> list[Run]:
    """The runs that hold `segments`' slots, each once (a trunk once for all its views)."""
    seen: dict[int, Run] = {}
    for segment in segments:
        seen.setdefault(id(segment.source), segment.source)
    return list(seen.values())


@dataclass(eq=False)
class Group:
    """Rows that read the same prefix segments. `own` is the segment this group prefills itself
    (None when every segment is another's); a row's slot s sits at position `prefix_len + s`."""

    id: int
    segments: list[Run | View]
    own: Run | None
    rows: list[Row] = field(default_factory=list)
    waiting: deque = field(default_factory=deque)  # rows not admitted yet (or preempted)
    admitted: bool = False
    live: int = 0  # rows not finished
    reserved: int = 0  # pool blocks its request could take (Engine._reserve), while it is open
    computed: int = 0  # prefix tokens its request computes (not shared, not copied)

    @property
    def prefix_len(self) -> int:
        return sum(s.length for s in self.segments)

    @property
    def ready(self) -> bool:
        return self.admitted and all(s.complete for s in self.segments)


@dataclass(eq=False)
class Row:
    """One row: the tokens it feeds (`context` = suffix then generated tokens), where their KV goes,
    and what it has produced. `computed` counts the context tokens whose KV is written.

    A row's slots are its own blocks (`blocks`: the first slot of each), or, for a stem row, the
    run `stem` (which becomes a segment of the fork group)."""

    id: int
    group: Group
    suffix_ids: list[int]
    params: SamplingParams
    samples: bool = True  # False: a stem row, which only computes KV
    stem: Run | None = None
    context: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    computed: int = 0
    admitted_at: int = -1  # admission counter while it holds slots; -1 when it holds none
    solo: bool = False  # a generate prompt: its completion counts the prompt as its own prefill
    retain: bool = False  # keep its KV after it finishes, until released
    pins: int = 0  # stem rows that may still copy their KV from this row's
    copy_from: tuple[Row, int] | None = None  # a stem row's base: (row, tokens to copy)
    recomputed: int = 0  # context tokens computed again after preemptions
    finish_reason: str | None = None
    stop: int | str | None = None
    logits: list[torch.Tensor] | None = None
    logprobs: list[float] | None = None
    entropies: list[float] | None = None
    hidden: torch.Tensor | None = None
    uniforms: list[float] | None = None  # sampled decoding: one uniform per new token
    # SamplingParams.score_suffix: one log-probability per token of the caller's suffix, which
    # starts at context index `scored_from` (after a token borrowed from the prefix)
    suffix_scores: list[float] | None = None
    scored_from: int = 0

    def __post_init__(self):
        self.context = list(self.suffix_ids)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def holds_slots(self) -> bool:
        return self.admitted_at >= 0

    def slot(self, index: int, block_size: int) -> int:
        """The pool slot of context token `index`."""
        if self.stem is not None:
            return self.stem.start + index
        return self.blocks[index // block_size] + index % block_size

    def completion(self, shared_prefill: int) -> Completion:
        own = len(self.suffix_ids) + self.recomputed
        if self.solo:  # a prompt is one sequence: all of it is its own prefill
            own, shared_prefill = own + shared_prefill, 0
        return Completion(
            token_ids=list(self.token_ids),
            finish_reason=self.finish_reason,
            stop=self.stop,
            prefill_tokens=own,
            shared_prefill_tokens=shared_prefill,
            decode_tokens=max(len(self.token_ids) - 1, 0),
            logits=torch.stack(self.logits) if self.logits is not None else None,
            logprobs=None if self.logprobs is None else list(self.logprobs),
            entropies=None if self.entropies is None else list(self.entropies),
            hidden=self.hidden,
            suffix_logprobs=None if self.suffix_scores is None else list(self.suffix_scores),
        )
