"""Next-token choice: greedy, or temperature + nucleus (top-p) sampling from per-sequence streams."""

from __future__ import annotations

import torch

from nudgeability.engine.sampling_params import SamplingParams


def uniform_stream(params: SamplingParams, length: int) -> torch.Tensor:
    """The `length` uniforms in [0, 1) a sampled sequence will consume, one per new token.

    Drawn up front from the sequence's own generator, so that its tokens depend only on its
    seed key and its logits, never on the batch around it.
    """
    if params.greedy:
        return torch.zeros(length, dtype=torch.float64)
    gen = torch.Generator().manual_seed(params.stream_seed())
    return torch.rand(length, generator=gen, dtype=torch.float64)


def sample(
    logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, uniforms: torch.Tensor
) -> torch.Tensor:
    """Choose one token per row of `logits` [n, V] (fp32).

    Rows with temperature 0 take the argmax (the first maximum, as HF does). Other rows sample by
    inverse CDF with their uniform from the nucleus: the most probable tokens whose cumulative
    probability first reaches `top_p` (at least one token), renormalised.
    """
    choice = logits.argmax(dim=-1)
    sampled = temperature > 0
    if not bool(sampled.any()):
        return choice
    idx = sampled.nonzero().squeeze(1)
    scaled = logits[idx].double() / temperature[idx, None].double()
    probs = torch.softmax(scaled, dim=-1)
    sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    cumulative = sorted_p.cumsum(dim=-1)
    # keep a token while the mass before it is still short of top_p
    keep = (cumulative - sorted_p) < top_p[idx, None].double()
    kept = sorted_p * keep
    cdf = kept.cumsum(dim=-1)
    target = uniforms[idx, None].to(cdf) * cdf[:, -1:]
    pick = (cdf <= target).sum(dim=-1).clamp_max(kept.shape[-1] - 1)
    choice[idx] = order.gather(1, pick[:, None]).squeeze(1)
    return choice


def token_uncertainty(
    logits: torch.Tensor, tokens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probability of each row's chosen token, entropy of the row's distribution), in nats,
    under softmax(logits) at temperature 1 over the whole vocabulary; float32 [n] each.

    One log-softmax per row and step: the cost of a campaign's uncertainty signal, instead of
    keeping `[tokens, vocab]` logits.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    chosen = logp.gather(1, tokens[:, None]).squeeze(1)
    entropy = -(logp.exp() * logp).sum(dim=-1)
    return chosen, entropy
