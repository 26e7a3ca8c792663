"""Per-row log-probability and entropy of a step's logits, each row reduced in an order that is its
own: one Triton program per row, the vocabulary walked in blocks of `BLOCK` from the first token,
each block summed by the same tree. So a row's bits do not depend on how many rows the launch
holds or where the row lies among them, as torch's `sum(dim=-1)` on CUDA does not promise (with few
rows it splits one row's sum over several blocks, and how many follows the row count).

For logits x of a row (fp32), m = max x, s = sum exp(x - m), t = sum exp(x - m) (x - m):
log p(token) = x[token] - m - log s, entropy = log s - t / s (= -sum p log p), in nats. On CPU
the engine keeps torch's formulation (sampler.token_uncertainty), which its records were made
with; on CUDA `token_uncertainty` and the suffix scores (engine/suffix_scores.py) call this.
Triton is imported lazily (models/quant/triton_kernels.py); with TRITON_INTERPRET=1 the kernel
runs on CPU tensors (tests/engine/sampling/test_row_stats.py).
"""

from __future__ import annotations

from functools import lru_cache

import torch

BLOCK = 1024  # vocabulary entries per step of a row's walk: a fixed rule, never the row count


@lru_cache(maxsize=1)
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def row_stats(
        x_ptr, tok_ptr, logp_ptr, ent_ptr, V, stride_x, BLOCK: tl.constexpr,
    ):  # fmt: skip
        row = tl.program_id(0).to(tl.int64)
        base = x_ptr + row * stride_x
        cols = tl.arange(0, BLOCK)
        top = tl.full([BLOCK], float("-inf"), tl.float32)
        for start in range(0, V, BLOCK):
            x = tl.load(base + start + cols, mask=start + cols < V, other=float("-inf"))
            top = tl.maximum(top, x.to(tl.float32))
        m = tl.max(top, axis=0)
        s = tl.zeros([BLOCK], tl.float32)
        t = tl.zeros([BLOCK], tl.float32)
        for start in range(0, V, BLOCK):
            mask = start + cols < V
            x = tl.load(base + start + cols, mask=mask, other=0.0).to(tl.float32)
            d = tl.where(mask, x - m, 0.0)
            e = tl.where(mask, tl.exp(d), 0.0)
            s += e
            t += e * d
        total = tl.sum(s, axis=0)
        log_total = tl.log(total)
        token = tl.load(tok_ptr + row)
        chosen = tl.load(base + token).to(tl.float32)
        tl.store(logp_ptr + row, chosen - m - log_total)
        tl.store(ent_ptr + row, log_total - tl.sum(t, axis=0) / total)

    return row_stats


def row_stats(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p of each row's `tokens` entry, the row's entropy), float32 [n] each, of `logits`
    [n, V] under softmax at temperature 1 (module docstring)."""
    x = logits.float().contiguous()
    n, vocab = x.shape
    logp = torch.empty(n, dtype=torch.float32, device=x.device)
    entropy = torch.empty(n, dtype=torch.float32, device=x.device)
    if n:
        ids = tokens.to(device=x.device, dtype=torch.int64).contiguous()
        _kernel()[(n,)](x, ids, logp, entropy, vocab, x.stride(0), BLOCK=BLOCK)
    return logp, entropy
