"""Random token ids and THE reference every generation in the suite is checked against: HF
`generate(do_sample=False)` on one sequence alone (the engine's arms, a run's records and
resolutions, the quantised models)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

ARCHS = ("llama", "qwen3", "glm4", "gemma4")


def random_ids(length: int, seed: int, low: int = 3, high: int = 300) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, (length,), generator=gen).tolist()


@dataclass(frozen=True)
class Greedy:
    """HF's greedy continuation of one sequence."""

    tokens: list[int]  # the new tokens (with the stop token that ended them, if any)
    logits: torch.Tensor  # [new tokens, vocab], fp32: the raw logits each token was chosen from


def hf_greedy(
    model, ids: list[int], max_new_tokens: int, stop_ids=(), *, min_new_tokens: int = 0, **options
) -> Greedy:
    """HF `generate(do_sample=False)` on `ids` alone, stopping at `stop_ids` (none given: the
    model's own EOS), after at least `min_new_tokens`; `options` go to `generate` as they are
    (e.g. `stop_strings` with `tokenizer`)."""
    inputs = torch.tensor([ids], device=next(model.parameters()).device)
    with torch.no_grad():
        out = model.generate(
            inputs,
            attention_mask=torch.ones_like(inputs),
            max_new_tokens=max_new_tokens,
            min_new_tokens=min_new_tokens,
            do_sample=False,
            eos_token_id=sorted(stop_ids) or None,
            pad_token_id=0,
            output_logits=True,
            return_dict_in_generate=True,
            **options,
        )
    tokens = out.sequences[0, inputs.shape[1] :].tolist()
    return Greedy(tokens, torch.stack(out.logits)[:, 0].float())


def assert_matches_reference(
    model, completion, full_ids: list[int], max_new_tokens: int, eos_ids, rtol=1e-4
):
    """Greedy tokens equal HF's exactly; every step's logits agree to `rtol` relative (to the max |logit|)."""
    reference = hf_greedy(model, full_ids, max_new_tokens, eos_ids)
    assert completion.token_ids == reference.tokens
    got = completion.logits
    assert got.shape == reference.logits.shape
    scale = reference.logits.abs().amax(dim=-1, keepdim=True)
    rel = ((got - reference.logits).abs() / scale).max().item()
    assert rel <= rtol, f"logits differ by {rel:.2e} relative"


def mixed_fork_requests():
    """Five forks of mixed prefix lengths, arm counts and budgets (empty suffixes included), each
    arm ignoring EOS: the workload of the budget and preemption tests."""
    from nudgeability.engine import ForkRequest, SamplingParams

    return [
        ForkRequest(
            random_ids(p, seed=p),
            [random_ids(s, seed=p + s) for s in sizes],
            [SamplingParams(max_new_tokens=b, ignore_eos=True) for b in budgets],
        )
        for p, sizes, budgets in (
            (90, (3, 1, 5), (10, 30, 4)),
            (140, (2, 8), (25, 6)),
            (60, (4, 0, 4, 1), (12, 12, 40, 3)),
            (200, (6,), (20,)),
            (75, (2, 3), (8, 33)),
        )
    ]
