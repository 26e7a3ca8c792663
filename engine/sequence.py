"""Requests, per-arm state and results."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from nudgeability.engine.sampling_params import SamplingParams

FINISH_REASONS = ("eos", "stop_token", "stop_string", "length")


@dataclass
class ForkRequest:
    """One prefix group: a prefix shared by every arm, and one suffix per arm.

    `params` is one `SamplingParams` for every arm, or a list with one per arm.
    """

    prefix_ids: list[int]
    suffixes: list[list[int]]
    params: SamplingParams | list[SamplingParams]


@dataclass
class Completion:
    """The result of one sequence.

    `prefill_tokens` counts the tokens run through the model for this sequence alone (an arm's
    suffix; a `generate` prompt in full). `shared_prefill_tokens` is its group's prefix, computed
    once for all arms of the group (0 for `generate`). `decode_tokens` counts single-token decode
    forwards (the first new token comes from the prefill). When an arm's suffix is empty, the
    engine moves the prefix's last token into every arm of the group, and the counts say so.
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


@dataclass
class Sequence:
    """The running state of one arm (a row of the batch)."""

    row: int
    group: int
    suffix_ids: list[int]
    params: SamplingParams
    shared_prefill: int  # the group's prefix length as run
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    stop: int | str | None = None
    logits: list[torch.Tensor] | None = None
    logprobs: list[float] | None = None
    entropies: list[float] | None = None
    hidden: torch.Tensor | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def completion(self) -> Completion:
        return Completion(
            token_ids=list(self.token_ids),
            finish_reason=self.finish_reason,
            stop=self.stop,
            prefill_tokens=len(self.suffix_ids),
            shared_prefill_tokens=self.shared_prefill,
            decode_tokens=max(len(self.token_ids) - 1, 0),
            logits=torch.stack(self.logits) if self.logits is not None else None,
            logprobs=None if self.logprobs is None else list(self.logprobs),
            entropies=None if self.entropies is None else list(self.entropies),
            hidden=self.hidden,
        )
