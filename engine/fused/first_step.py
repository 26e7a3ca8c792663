"""The fused layer kernels' check, made once before the run (engine/kernel_checks.py).

The model runner compares its fused forward with the library's forward of the same tokens once,
on a probe forward that can show a wrong kernel: random token ids at positions past 0, more than
one token (`conclusive`), on scratch blocks of the pool (`KVPool.scratch`), so that which path
computes the run, and the run's K/V, never depend on which of its steps came first. The capture
warm-up of the fixed-shape decode's buckets is no such forward: pad tokens at position 0, where
rotary is the identity and every row is the same, so that a cos/sin index or a row stride could
be wrong and agree.

Three comparisons, each of which refuses the kernels (`disagreement`):

- **the hidden states** after the final norm, element by element: |fused - library| <=
  B * (|library| + rms of its row). Each fused op rounds an element once where the library's ops
  round it once too, so the two differ by about a unit of the dtype's last place per op and
  layer; B is 32 units (bf16 2^-3, fp16 2^-6), fp32 the engine's own 1e-4 of its guarantee
  (engine/README.md). The row's rms keeps an element near 0 from a bound of 0; the element's own
  magnitude keeps an outlier dimension from a bound other elements' errors hide under, as
  0.1 x max |hidden| did (a checkpoint whose outlier dims reach 100 x the rms passed O(1) errors
  on every other dimension).
- **greedy ids**: each compared row's argmax of the logits must be the library's, or part from it
  only at a near-tie of the library's own logits (its margin within B of the row's largest |logit|);
- **finite** outputs.
"""

from __future__ import annotations

import torch

UNIT = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
# the bound B of the module docstring, per dtype
BOUND = {torch.float32: 1e-4, **{dtype: 32 * u for dtype, u in UNIT.items()}}
ROWS = 64  # tokens of the step whose logits are compared (spread over it; the last one included)


def conclusive(input_ids: torch.Tensor, position_ids: torch.Tensor) -> bool:
    """Whether a forward can show a wrong kernel: several tokens, some past position 0, not all at
    one position (rotary is then not the identity, and rows differ)."""
    positions = position_ids.reshape(-1)
    if input_ids.numel() < 2 or positions.numel() < 2:
        return False
    return bool((positions > 0).any()) and bool((positions != positions[0]).any())


def disagreement(fused: torch.Tensor, reference: torch.Tensor, logits) -> str | None:
    """None where the fused hidden states [1, L, hidden] agree with the library's (module
    docstring), else how far they are. `logits(rows [n, hidden]) -> [n, vocab]` is the runner's
    LM head."""
    fused, reference = fused.reshape(-1, fused.shape[-1]), reference.reshape(-1, fused.shape[-1])
    if not bool(torch.isfinite(fused).all()):
        return "non-finite hidden states"
    bound = BOUND.get(reference.dtype, BOUND[torch.bfloat16])
    ref = reference.float()
    rms = ref.pow(2).mean(-1, keepdim=True).sqrt()
    excess = (fused.float() - ref).abs() / (bound * (ref.abs() + rms).clamp_min(1e-30))
    worst = excess.max().item()
    if worst > 1:
        row, col = divmod(int(excess.argmax()), excess.shape[1])
        return (
            f"hidden states {worst:.3g} x the bound {bound:g} x (|h| + rms) apart (token {row}, "
            f"dim {col}; {int((excess > 1).sum())} of {excess.numel()} elements over)"
        )
    picked = _spread(fused.shape[0])
    got, want = logits(fused[picked]), logits(reference[picked])
    ours, theirs = got.argmax(-1), want.argmax(-1)
    scale = want.abs().amax(-1).clamp_min(1e-30)
    margin = (want.gather(1, theirs[:, None]) - want.gather(1, ours[:, None]))[:, 0] / scale
    wide = (ours != theirs) & (margin > bound)
    if bool(wide.any()):
        at = int(wide.nonzero()[0])
        return (
            f"greedy ids differ at {int(wide.sum())} of {len(picked)} tokens beyond a near-tie "
            f"(token {picked[at]}: the library's margin {margin[at].item():.3g} of its largest "
            f"logit, bound {bound:g})"
        )
    return None


def _spread(tokens: int) -> list[int]:
    """Up to `ROWS` token indices spread over the step, the first and the last among them."""
    if tokens <= ROWS:
        return list(range(tokens))
    return sorted({round(i * (tokens - 1) / (ROWS - 1)) for i in range(ROWS)})
