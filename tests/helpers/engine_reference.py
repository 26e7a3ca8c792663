"""Random token ids, and the checks against THE reference every generation in the suite is held
to: HF `generate(do_sample=False)` on one sequence alone (`hf_greedy`, owned by
nudgeability.bench.reference)."""

from __future__ import annotations

import torch

from nudgeability.bench.reference import hf_greedy

ARCHS = ("llama", "qwen3", "glm4", "gemma4")


def random_ids(length: int, seed: int, low: int = 3, high: int = 300) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, (length,), generator=gen).tolist()


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
