"""THE reference every generation is checked and timed against: HF `generate(do_sample=False)`
on one sequence alone. The tests check the engine's arms, a run's records and resolutions and the
quantised models against it (tests/helpers/engine_reference.py); `nudge bench --baseline` and the
benchmarks time it per arm (costs/splice_workload.py `hf_generate`).

Where two runs of the same arithmetic round differently (another reduction order, bf16 kernels),
greedy tokens may part at a near-tie: `parting` finds the first step where a run leaves the
reference and HF's own margin there, `near_tie` says whether that margin is within the bound of
a tie at the logits' tolerance. The tests' `assert_matches_reference(ties=...)` and the GPU
check's campaign (benchmarks/benchkit/gpu/engine_speed.py) both hold tokens to this one rule."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Greedy:
    """HF's greedy continuation of one sequence."""

    tokens: list[int]  # the new tokens (with the stop token that ended them, if any)
    logits: (
        torch.Tensor | None
    )  # [new tokens, vocab], fp32: the raw logits each token was chosen from


def hf_greedy(
    model,
    ids: list[int],
    max_new_tokens: int,
    stop_ids=(),
    *,
    min_new_tokens: int = 0,
    logits: bool = True,
    **options,
) -> Greedy:
    """HF `generate(do_sample=False)` on `ids` alone, stopping at `stop_ids` (none given: the
    model's own EOS), after at least `min_new_tokens`; `options` go to `generate` as they are
    (e.g. `stop_strings` with `tokenizer`). `logits=False` keeps none (`Greedy.logits` is None),
    for a timed baseline."""
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
            output_logits=logits,
            return_dict_in_generate=True,
            **options,
        )
    tokens = out.sequences[0, inputs.shape[1] :].tolist()
    return Greedy(tokens, torch.stack(out.logits)[:, 0].float() if logits else None)


# the relative logit tolerance (of the largest |logit|) a generation is held to in each dtype:
# fp32 kernels 1e-4; bf16 kernels 16 bf16 units (2^-8), as the suite's bf16 tests
RTOL = {torch.float32: 1e-4, torch.bfloat16: 16 * 2.0**-8, torch.float16: 16 * 2.0**-11}


def parting(want: list[int], got: list[int], logits: torch.Tensor) -> tuple[int, float] | None:
    """The first step where `got` leaves the reference tokens `want`, and HF's own margin there:
    the reference's logit of its token less its logit of `got`'s, relative to the step's largest
    |logit| (`logits`: the reference's [steps, vocab], one row per token of `want`). None where
    `got` never leaves `want`."""
    step = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    if step is None:
        return None
    row = logits[step].float()
    gap = (row[want[step]] - row[got[step]]).item() / row.abs().max().item()
    return step, gap


def near_tie(margin: float, rtol: float) -> bool:
    """Whether tokens may part at a step where HF's margin is `margin`: its two candidates lie
    within 2 * `rtol` of each other, a tie at the precision the logits are held to."""
    return 0 <= margin <= 2 * rtol
