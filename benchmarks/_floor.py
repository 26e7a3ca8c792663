"""The floors the engine is measured against (`fork_vs_generate.py`), timed the way the engine is.

Two floors, both measured in the benchmark's own process:

- **the linear floor** (issue 17's definition): HF's own forward with no cache: the prefix in one
  forward, the arms' suffix tokens packed into one forward, and for each decode step the model on
  one token per arm with no past (embeddings, linear layers, norms, LM head; attention over the
  cache is left out). The decode piece runs once per decode step, back to back, as the engine's
  decode loop does, and is divided by the number of steps, so that both sides are per-step means
  of the same loop length; a best-of-N single forward would compare a minimum against a mean.
- **the attention floor**: the attention work that any shared-prefix ("cascade") implementation
  must still do on top of the linear floor, timed with torch's fused CPU attention kernel alone
  on random tensors of the run's shapes: per layer, the arms' queries folded over their
  kv-heads against the prefix (read once for all arms), and each arm against its own suffix
  slots; in the prefill, the packed suffix tokens against the prefix. Nothing of the engine runs
  here (no masks built, no merge, no cache writes). Before each step the CPU caches are flushed by
  reading a buffer as large as the model's weights, as the weights' own stream does in a real
  step; without it the prefix K/V would stay cached and the floor would be unrealistically low.

Each piece is the best of `rounds` rounds, as the engine's figures are the best of its runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Floor:
    prefix: float  # seconds: HF forward over the prefix
    suffix: float  # seconds: HF forward over the packed suffix tokens
    step: float  # seconds per decode step: the model on the arms' rows, no past


@dataclass(frozen=True)
class AttentionFloor:
    prefill: float  # seconds: the packed suffix tokens against the prefix, every layer
    step: float  # seconds per decode step: prefix part + suffix part, every layer


def _best(fn, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def linear_floor(model, prefix, suffixes, new: int, rounds: int) -> Floor:
    """HF's forward with no cache over the three pieces (see the module docstring)."""
    ids = torch.tensor([prefix])
    packed = torch.tensor([[t for s in suffixes for t in s]])
    rows = torch.tensor([[s[-1]] for s in suffixes])
    steps = new - 1

    def forward(x):
        model(input_ids=x, use_cache=False, logits_to_keep=1)

    def decode_loop():
        for _ in range(steps):
            forward(rows)

    with torch.inference_mode():
        return Floor(
            prefix=_best(lambda: forward(ids), rounds),
            suffix=_best(lambda: forward(packed), rounds),
            step=_best(decode_loop, rounds) / steps,
        )


def attention_floor(model, prefix_len: int, suffix_lengths: list[int], new: int, rounds: int):
    """The cascade's own attention kernels alone, on the run's shapes (module docstring)."""
    config = model.config
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    d = getattr(config, "head_dim", None) or config.hidden_size // heads
    g, arms, scale = heads // kv, len(suffix_lengths), d**-0.5
    s_max, packed = max(suffix_lengths), sum(suffix_lengths)
    kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    gen = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    pk = [randn(1, kv, prefix_len, d) for _ in range(layers)]
    pv = [randn(1, kv, prefix_len, d) for _ in range(layers)]
    sk = [randn(arms, kv, s_max + new, d) for _ in range(layers)]
    sv = [randn(arms, kv, s_max + new, d) for _ in range(layers)]
    q_fold, q_rows, q_packed = (
        randn(1, kv, arms * g, d),
        randn(arms, kv, g, d),
        randn(1, kv, packed * g, d),
    )
    weights = sum(p.numel() for p in model.parameters())
    flush = torch.ones(weights)
    # decode step i reads suffix slots [0, s_max + i); slot j is visible to arm r when j <= S_r + i - 1
    lengths = torch.tensor(suffix_lengths)[:, None]
    biases = []
    for i in range(1, new):
        visible = torch.arange(s_max + i) <= lengths + i - 1
        biases.append(torch.where(visible, 0.0, torch.finfo(torch.float32).min)[:, None, None, :])

    def prefill():
        flush.sum()
        t0 = time.perf_counter()
        for layer in range(layers):
            kernel(q_packed, pk[layer], pv[layer], 0.0, False, scale=scale)
        return time.perf_counter() - t0

    def decode():
        total = 0.0
        for i, bias in enumerate(biases, start=1):
            hw = s_max + i
            flush.sum()
            t0 = time.perf_counter()
            for layer in range(layers):
                kernel(q_fold, pk[layer], pv[layer], 0.0, False, scale=scale)
                ks, vs = sk[layer][:, :, :hw], sv[layer][:, :, :hw]
                kernel(q_rows, ks, vs, 0.0, False, attn_mask=bias, scale=scale)
            total += time.perf_counter() - t0
        return total / len(biases)

    with torch.inference_mode():
        return AttentionFloor(
            prefill=min(prefill() for _ in range(rounds)),
            step=min(decode() for _ in range(rounds)),
        )
