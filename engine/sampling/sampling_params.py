"""How one sequence is decoded."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from nudgeability.engine.errors import EngineInputError


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Decoding settings of one sequence.

    `temperature == 0` is greedy. Sampled decoding (temperature > 0, nucleus `top_p`) needs a
    `seed_key`, e.g. `(seed, problem_id, condition)`: the sequence gets its own random stream
    derived from it, so its tokens do not depend on what else is in the batch, or in what order.
    Generation stops at EOS, at any of `stop_token_ids`, when the decoded text gains one of
    `stop_strings`, or after `max_new_tokens`. `ignore_eos` keeps going past EOS (benchmarks use it
    to generate a fixed number of tokens).
    `token_stats` returns, per new token, its log-probability and the entropy (nats) of the
    model's own next-token distribution (softmax of the logits at temperature 1, whole
    vocabulary), whatever the decoding; `return_hidden` returns the final-layer hidden state that
    chose the first new token, i.e. at the prompt's last position (float16). Both are small
    summaries: no `[tokens, vocab]` tensor is kept.
    `score_suffix` (a fork's arms) returns the log-probability of each token of the arm's suffix
    given everything before it, teacher-forced, computed in the arm's own prefill
    (`Completion.suffix_logprobs`, engine/suffix_scores.py; empty for an empty suffix and for a
    `generate` prompt, which has none).
    """

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed_key: object = None
    stop_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()
    ignore_eos: bool = False
    token_stats: bool = False
    return_hidden: bool = False
    score_suffix: bool = False

    def __post_init__(self):
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise EngineInputError(
                f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}"
            )
        if self.temperature < 0:
            raise EngineInputError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise EngineInputError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.temperature > 0 and self.seed_key is None:
            raise EngineInputError(
                "sampled decoding (temperature > 0) needs a seed_key, e.g. (seed, problem_id, condition)"
            )
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        object.__setattr__(self, "stop_strings", tuple(self.stop_strings))
        if any(not s for s in self.stop_strings):
            raise EngineInputError("stop_strings must not contain an empty string")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def stream_seed(self) -> int:
        """A 63-bit seed derived from `seed_key` (stable across processes and Python versions)."""
        digest = hashlib.sha256(repr(self.seed_key).encode()).digest()
        return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)
