"""Random token ids and the HF `generate()` reference the engine is checked against."""

from __future__ import annotations

import torch

ARCHS = ("llama", "qwen3", "glm4", "gemma4")


def random_ids(length: int, seed: int, low: int = 3, high: int = 300) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, (length,), generator=gen).tolist()


def hf_greedy(
    model, ids: list[int], max_new_tokens: int, eos_ids
) -> tuple[list[int], torch.Tensor]:
    """The reference: HF `generate(do_sample=False)` on `ids` alone; (new tokens, per-step fp32 logits)."""
    inputs = torch.tensor([ids])
    out = model.generate(
        inputs,
        attention_mask=torch.ones_like(inputs),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=sorted(eos_ids) or None,
        pad_token_id=min(eos_ids, default=0),
        output_logits=True,
        return_dict_in_generate=True,
    )
    tokens = out.sequences[0, inputs.shape[1] :].tolist()
    return tokens, torch.stack(out.logits)[:, 0].float()


def assert_matches_reference(
    model, completion, full_ids: list[int], max_new_tokens: int, eos_ids, rtol=1e-4
):
    """Greedy tokens equal HF's exactly; every step's logits agree to `rtol` relative (to the max |logit|)."""
    tokens, logits = hf_greedy(model, full_ids, max_new_tokens, eos_ids)
    assert completion.token_ids == tokens
    got = completion.logits
    assert got.shape == logits.shape
    scale = logits.abs().amax(dim=-1, keepdim=True)
    rel = ((got - logits).abs() / scale).max().item()
    assert rel <= rtol, f"logits differ by {rel:.2e} relative"


def hf_greedy_ids(model, ids: list[int], max_new_tokens: int, stop_ids, **generate_kwargs):
    """The new tokens of HF `generate(do_sample=False)` on `ids` alone, stopping at `stop_ids` (a
    family's stop tokens): the reference a run's records are checked against."""
    inputs = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(
            inputs,
            attention_mask=torch.ones_like(inputs),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=list(stop_ids),
            pad_token_id=0,
            **generate_kwargs,
        )
    return out[0, len(ids) :].tolist()
