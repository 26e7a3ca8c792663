"""The floors the engine is measured against (`fork_vs_generate.py`), interleaved with it step by
step so that a slow spell of a shared machine lands on both sides of each ratio.

Two floors, both measured in the benchmark's own process:

- **the linear floor** (issue 17's definition): HF's own forward with no cache: the prefix in one
  forward, the arms' suffix tokens packed into one forward, and for each decode step the model on
  one token per arm with no past (embeddings, linear layers, norms, LM head; attention over the
  cache is left out).
- **the attention floor**: the attention work that any shared-prefix ("cascade") implementation
  must still do on top of the linear floor, timed with torch's fused CPU attention kernel alone
  on random tensors of the run's shapes: per layer, the arms' queries folded over their kv-heads
  against the prefix (read once for all arms), and each arm against its own suffix slots; in the
  prefill, the packed suffix tokens against the prefix. Nothing of the engine runs here (no
  masks built, no merge, no cache writes).

`interleaved_fork` submits the fork to the engine and steps it: after the engine's prefill steps
come the floors' prefill pieces, and after each engine decode step the linear floor's step and
the attention kernels of that step's shapes. The linear forward streams every weight through the CPU
caches just before the attention kernels run, so their K/V are as cold as in a real step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Piece:
    prefill: float  # seconds
    step: float  # seconds per decode step (mean)
    wall: float  # seconds


@dataclass(frozen=True)
class Round:
    """One interleaved fork: the engine and both floors, and the linear floor's own pieces."""

    engine: Piece
    linear: Piece
    attention: Piece
    prefix: float  # the linear floor's prefix forward, seconds
    suffix: float  # its packed-suffix forward, seconds
    tokens: list[list[int]]  # the engine's arms


class AttentionKernels:
    """The cascade's own attention kernels alone, on the run's shapes; tensors built once."""

    def __init__(self, model, prefix_len: int, suffix_lengths: list[int], new: int):
        config = model.config
        self.layers, heads = config.num_hidden_layers, config.num_attention_heads
        kv = getattr(config, "num_key_value_heads", None) or heads
        d = getattr(config, "head_dim", None) or config.hidden_size // heads
        g, arms, self.scale = heads // kv, len(suffix_lengths), d**-0.5
        self.s_max, packed = max(suffix_lengths), sum(suffix_lengths)
        gen = torch.Generator().manual_seed(0)

        def randn(*shape):
            return torch.randn(*shape, generator=gen)

        self.pk = [randn(1, kv, prefix_len, d) for _ in range(self.layers)]
        self.pv = [randn(1, kv, prefix_len, d) for _ in range(self.layers)]
        self.sk = [randn(arms, kv, self.s_max + new, d) for _ in range(self.layers)]
        self.sv = [randn(arms, kv, self.s_max + new, d) for _ in range(self.layers)]
        self.q_fold, self.q_rows = randn(1, kv, arms * g, d), randn(arms, kv, g, d)
        self.q_packed = randn(1, kv, packed * g, d)
        # decode step i reads slots [0, s_max + i); slot j is visible to arm r when j <= S_r + i - 1
        lengths = torch.tensor(suffix_lengths)[:, None]
        low = torch.finfo(torch.float32).min
        self.biases = {
            i: torch.where(torch.arange(self.s_max + i) <= lengths + i - 1, 0.0, low)[:, None, None]
            for i in range(1, new)
        }
        self.kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu

    def prefill(self) -> float:
        t0 = time.perf_counter()
        for layer in range(self.layers):
            self.kernel(self.q_packed, self.pk[layer], self.pv[layer], 0.0, False, scale=self.scale)
        return time.perf_counter() - t0

    def step(self, i: int) -> float:
        """Decode step `i` (the arms have `i` new tokens): prefix part + suffix part, every layer."""
        hw, bias = self.s_max + i, self.biases[i]
        t0 = time.perf_counter()
        for layer in range(self.layers):
            self.kernel(self.q_fold, self.pk[layer], self.pv[layer], 0.0, False, scale=self.scale)
            ks, vs = self.sk[layer][:, :, :hw], self.sv[layer][:, :, :hw]
            self.kernel(self.q_rows, ks, vs, 0.0, False, attn_mask=bias, scale=self.scale)
        return time.perf_counter() - t0


def _timed(fn, *args, **kwargs) -> float:
    t0 = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - t0


def interleaved_fork(engine, model, kernels: AttentionKernels, prefix, suffixes, params) -> Round:
    """One fork of `suffixes` from `prefix` with both floors interleaved (module docstring).

    The engine's prefill is its steps until every arm has its first token; its wall time is the
    fork's wall time less the time spent in the floors."""
    from nudgeability.engine import ForkRequest

    ids = torch.tensor([prefix])
    packed = torch.tensor([[t for s in suffixes for t in s]])
    rows = torch.tensor([[s[-1]] for s in suffixes])

    def forward(x) -> float:
        """Seconds of HF's own forward of `x`, with HF's attention (switched outside the timing)."""
        with engine.runner.own_attention():
            return _timed(model, input_ids=x, use_cache=False, logits_to_keep=1)

    steps = {"engine": [], "linear": [], "attention": []}
    engine.stats = type(engine.stats)()
    with torch.inference_mode():
        t0 = time.perf_counter()
        refs = engine.submit_fork(ForkRequest(prefix, suffixes, params))
        while not all(engine.peek(r) for r in refs):
            engine.step()
        engine_prefill = time.perf_counter() - t0
        t1 = time.perf_counter()
        prefill = {
            "prefix": forward(ids),
            "suffix": forward(packed),
            "attention": kernels.prefill(),
        }
        spent = time.perf_counter() - t1  # seconds in the floors, outside the engine
        tokens = {r.id: None for r in refs}
        i = 1
        while engine.busy:
            t2 = time.perf_counter()
            for ref, completion in engine.step():
                tokens[ref.id] = completion.token_ids
            t3 = time.perf_counter()
            steps["engine"].append(t3 - t2)
            steps["linear"].append(forward(rows))
            steps["attention"].append(kernels.step(i))
            spent += time.perf_counter() - t3
            i += 1
        wall = time.perf_counter() - t0 - spent

    def piece(name: str, prefill_s: float, wall_s: float | None = None) -> Piece:
        n = len(steps[name])
        total = prefill_s + sum(steps[name])
        return Piece(prefill_s, sum(steps[name]) / n, total if wall_s is None else wall_s)

    return Round(
        engine=piece("engine", engine_prefill, wall),
        linear=piece("linear", prefill["prefix"] + prefill["suffix"]),
        attention=piece("attention", prefill["attention"]),
        prefix=prefill["prefix"],
        suffix=prefill["suffix"],
        tokens=[tokens[r.id] for r in refs],
    )
