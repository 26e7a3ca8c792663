"""THE reference every generation is checked and timed against: HF `generate(do_sample=False)`
on one sequence alone. The tests check the engine's arms, a run's records and resolutions and the
quantised models against it (tests/helpers/engine_reference.py); `nudge bench --baseline` and the
benchmarks time it per arm (workload.hf_generate)."""

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
