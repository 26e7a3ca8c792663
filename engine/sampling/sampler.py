"""Next-token choice: greedy, or temperature + nucleus (top-p) sampling from per-sequence streams.

Everything here stays on the device: the engine reads the chosen tokens on the host once per step
(`choose.choose_tokens`). Per-token quantities derived from the same logits (log-probability
of the chosen token, entropy, ...) belong in this module, as device tensors returned beside the
tokens, so that they can travel to the host in that same single read.
"""

from __future__ import annotations

import torch

from nudgeability.engine.sampling.row_stats import row_stats
from nudgeability.engine.sampling.sampling_params import SamplingParams
from nudgeability.models.quant.triton_kernels import available


def uniform_stream(params: SamplingParams, length: int) -> torch.Tensor:
    """The `length` uniforms in [0, 1) a sampled sequence will consume, one per new token.

    Drawn up front from the sequence's own generator, so that its tokens depend only on its
    seed key and its logits, never on the batch around it.
    """
    if params.greedy:
        return torch.zeros(length, dtype=torch.float64)
    gen = torch.Generator().manual_seed(params.stream_seed())
    return torch.rand(length, generator=gen, dtype=torch.float64)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """The first maximum of each row of `logits` [n, V], as HF's greedy search takes it.

    `max(dim).indices` and `argmax` are both documented to return the first maximal index; on CPU
    the former is measured to be faster at a decode step's shapes (a dozen rows of SmolLM2's
    vocabulary)."""
    return logits.max(dim=-1).indices


def sample(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    uniforms: torch.Tensor,
    sampled_rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """Choose one token per row of `logits` [n, V] (fp32).

    Rows with temperature 0 take the argmax (the first maximum, as HF does). Other rows sample by
    inverse CDF with their uniform from the nucleus: the most probable tokens whose cumulative
    probability first reaches `top_p` (at least one token), renormalised, taken in token-id order.

    `sampled_rows` are the indices of the rows with temperature > 0 when the caller knows them on
    the host (the engine does); otherwise they are found on the device, which costs a host sync.
    """
    choice = greedy(logits)
    idx = (temperature > 0).nonzero().squeeze(1) if sampled_rows is None else sampled_rows
    if len(idx) == 0:
        return choice
    scaled = logits[idx].double() / temperature[idx, None].double()
    probs = torch.softmax(scaled, dim=-1)
    sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    cumulative = sorted_p.cumsum(dim=-1)
    # keep a token while the mass before it is still short of top_p
    keep_sorted = (cumulative - sorted_p) < top_p[idx, None].double()
    keep = torch.zeros_like(keep_sorted).scatter_(1, order, keep_sorted)
    # Walk the CDF in token-id order, not in probability order: two near-equal probabilities
    # that a rounding difference (another batch size) swaps would otherwise swap the tokens
    # they map to. The distribution is the same; only the uniform -> token map is steadier.
    kept = probs * keep
    cdf = kept.cumsum(dim=-1)
    target = uniforms[idx, None].to(cdf) * cdf[:, -1:]
    pick = (cdf <= target).sum(dim=-1).clamp_max(kept.shape[-1] - 1)
    choice[idx] = pick
    return choice


def token_uncertainty(
    logits: torch.Tensor, tokens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probability of each row's chosen token, entropy of the row's distribution), in nats,
    under softmax(logits) at temperature 1 over the whole vocabulary; float32 [n] each.

    One pass over each row per step: the cost of a campaign's uncertainty signal, instead of
    keeping `[tokens, vocab]` logits. On CUDA each row is reduced by a program of its own
    (row_stats.py), so its bits do not depend on the rows beside it; on CPU by torch's
    log-softmax and sum, as the records were made."""
    if logits.device.type == "cuda" and available():
        return row_stats(logits, tokens)
    logp = torch.log_softmax(logits.float(), dim=-1)
    chosen = logp.gather(1, tokens[:, None]).squeeze(1)
    entropy = -(logp.exp() * logp).sum(dim=-1)
    return chosen, entropy
