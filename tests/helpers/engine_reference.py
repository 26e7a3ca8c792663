"""Random token ids, and the checks against THE reference every generation in the suite is held
to: HF `generate(do_sample=False)` on one sequence alone (`hf_greedy`, owned by
nudgeability.models.testing.reference, with the near-tie rule `parting` / `near_tie`)."""

from __future__ import annotations

import torch

from nudgeability.models.testing.reference import hf_greedy, near_tie, parting

ARCHS = ("llama", "qwen3", "glm4", "gemma4")


def random_ids(length: int, seed: int, low: int = 3, high: int = 300) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, (length,), generator=gen).tolist()


def family_greedy(model, tokenizer, family, ids: list[int], max_new_tokens: int) -> list[int]:
    """HF greedy tokens after `ids`, stopping where a run of `family` stops: at its stop tokens
    or, decoded by `tokenizer`, at its stop strings (a call's close)."""
    return hf_greedy(
        model,
        ids,
        max_new_tokens,
        family.stop_token_ids,
        stop_strings=family.stop_strings or None,
        tokenizer=tokenizer,
    ).tokens


def assert_matches_reference(
    model, completion, full_ids: list[int], max_new_tokens: int, eos_ids, rtol=1e-4, ties=False
):
    """Greedy tokens equal HF's exactly; every step's logits agree to `rtol` relative (to the max |logit|).

    `ties`: where both runs may round differently (bf16 kernels: `rtol` is their bound), the
    tokens may part at a step whose two candidates HF itself scores within 2 * `rtol` of each
    other, a tie at that precision; the logits are compared up to and including that step, and
    the two continuations, now different sequences, no further."""
    reference = hf_greedy(model, full_ids, max_new_tokens, eos_ids)
    want, got_ids = reference.tokens, completion.token_ids
    steps = len(want)
    parted = parting(want, got_ids, reference.logits) if ties else None
    if parted is not None:
        step, gap = parted
        assert near_tie(gap, rtol), f"step {step}: tokens part with HF's margin {gap:.2e}"
        steps = step + 1
    else:
        assert got_ids == want
    got = completion.logits[:steps]
    expected = reference.logits[:steps]
    assert got.shape == expected.shape
    scale = expected.abs().amax(dim=-1, keepdim=True)
    rel = ((got - expected).abs() / scale).max().item()
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


def random_fork(prefix: tuple[int, int], lengths, suffix_seed: int, new_tokens: int):
    """A fork of random ids: prefix `random_ids(*prefix)` (length, seed), one suffix of each
    length n in `lengths` drawn with seed `suffix_seed + n`, `new_tokens` greedy tokens per arm."""
    from nudgeability.engine import ForkRequest, SamplingParams

    suffixes = [random_ids(n, seed=suffix_seed + n) for n in lengths]
    return ForkRequest(random_ids(*prefix), suffixes, SamplingParams(max_new_tokens=new_tokens))


def assert_forks_match_reference(model, engine, requests, results, rtol=1e-4, ties=False) -> None:
    """Every arm of every request (one list of arms per request, in order) equals its full
    prompt's solo greedy run (`assert_matches_reference`, with its `ties`)."""
    assert [len(arms) for arms in results] == [len(req.suffixes) for req in requests]
    for req, arms in zip(requests, results):
        for suffix, arm in zip(req.suffixes, arms):
            budget = req.params.max_new_tokens
            assert_matches_reference(
                model, arm, req.prefix_ids + suffix, budget, engine.eos_ids, rtol, ties
            )
