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
- **the fixed-shape attention**: the same two pieces on the shapes the engine's batch-invariant
  CPU attention gives them (engine/invariant/cpu/attention.py), with its own functions: the
  queries against the prefix in 16-row tiles over whole key blocks (`shared_keys_attention`),
  each arm's token against its own slots padded to a multiple of OWN_BLOCK, one token's heads
  per kernel item, the arms grouped by that width (`own_keys_attention`). Not a floor of the
  work but of the construction: what a cascade whose every call has a shape fixed by the row
  alone must run at the least, on one core (fork_vs_generate.py's thread count). The gap between
  the two attention rows is the kernels' price of invariance on the machine; the gap between
  the engine and linear + fixed-shape is everything else the engine does.

`interleaved_fork` submits the fork to the engine and steps it: after the engine's prefill steps
come the floors' prefill pieces, and after each engine decode step the linear floor's step and
the attention kernels of that step's shapes. The linear forward streams every weight through the CPU
caches just before the attention kernels run, so their K/V are as cold as in a real step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from nudgeability.engine.invariant.cpu.attention import (
    OWN_BLOCK,
    own_keys_attention,
    pad_keys,
    segment_width,
    shared_keys_attention,
)


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
    fixed: Piece  # the attention's pieces on the engine's fixed shapes
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
        # the fixed-shape pieces: the prefix padded to its segment width (hidden past its end,
        # as the engine's bias hides the pool slots it reads in place), the arms' own slots to
        # the widest multiple of OWN_BLOCK a step reaches
        width = segment_width(prefix_len)
        self.pk_fixed = [pad_keys(k[0], width) for k in self.pk]
        self.pv_fixed = [pad_keys(v[0], width) for v in self.pv]
        self.prefix_bias = None
        if width != prefix_len:
            self.prefix_bias = torch.where(torch.arange(width) < prefix_len, 0.0, low)
            self.prefix_bias = self.prefix_bias.view(1, 1, 1, width)
        self.kv, self.g, self.d, self.lengths = kv, g, d, suffix_lengths
        most = -(-(self.s_max + new) // OWN_BLOCK) * OWN_BLOCK
        self.own_k = [randn(kv, arms, most, d) for _ in range(self.layers)]
        self.own_v = [randn(kv, arms, most, d) for _ in range(self.layers)]
        self._own: dict[tuple, tuple] = {}  # (arms, width) -> q, every layer's keys and values

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

    def fixed_prefill(self) -> float:
        """The prefill's piece on the fixed shapes: the packed suffix tokens against the prefix
        in 16-row tiles (or the wider ones `shared_keys_attention` takes where they agree)."""
        folded = self.q_packed[0]
        t0 = time.perf_counter()
        for layer in range(self.layers):
            shared_keys_attention(
                folded, self.pk_fixed[layer], self.pv_fixed[layer], self.prefix_bias, self.scale
            )
        return time.perf_counter() - t0

    def fixed_step(self, i: int) -> float:
        """Decode step `i` on the fixed shapes: the folded arms against the prefix in 16-row
        tiles, and each arm's token against its own slots [0, OWN_BLOCK-multiple), one call per
        width, as `step_layout._by_key_width` groups the rows."""
        calls = self._own_calls(i)  # built outside the timing, as the engine's masks are kept
        folded = self.q_fold[0]
        t0 = time.perf_counter()
        for layer in range(self.layers):
            shared_keys_attention(
                folded, self.pk_fixed[layer], self.pv_fixed[layer], self.prefix_bias, self.scale
            )
            for q, keys, values, bias in calls:
                own_keys_attention(q, keys[layer], values[layer], bias, self.scale)
        return time.perf_counter() - t0

    def _own_calls(self, i: int) -> list[tuple]:
        """Step `i`'s own-keys calls: arm r's token sits at slot S_r + i - 1 and reads the first
        ceil((S_r + i) / OWN_BLOCK) * OWN_BLOCK slots of its row, the slots after it hidden."""
        by_width: dict[int, list[int]] = {}
        for r, length in enumerate(self.lengths):
            by_width.setdefault(-(-(length + i) // OWN_BLOCK) * OWN_BLOCK, []).append(r)
        wanted = {(tuple(arms), width) for width, arms in by_width.items()}
        # the widths change a few times a fork: keep only this step's sets of arms and width
        self._own = {key: kept for key, kept in self._own.items() if key in wanted}
        calls = []
        for width, arms in sorted(by_width.items()):
            kv, g, d, m = self.kv, self.g, self.d, len(arms)
            if (tuple(arms), width) not in self._own:
                index = torch.tensor(arms)
                # (kv head, arm) pairs, kv-major, as the engine gathers them from its pool
                keys, values = (
                    [
                        t.index_select(1, index)[:, :, :width].reshape(kv * m, 1, width, d)
                        for t in ts
                    ]
                    for ts in (self.own_k, self.own_v)
                )
                q = self.q_rows.index_select(0, index).transpose(0, 1).reshape(kv * m, 1, g, d)
                self._own[(tuple(arms), width)] = (q, keys, values)
            q, keys, values = self._own[(tuple(arms), width)]
            last = torch.tensor([self.lengths[r] + i - 1 for r in arms])
            visible = torch.arange(width)[None, :] <= last[:, None]  # [m, width]
            bias = torch.where(visible, 0.0, torch.finfo(torch.float32).min)
            bias = bias[None].expand(kv, m, width).reshape(kv * m, 1, 1, width)
            calls.append((q, keys, values, bias))
        return calls


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

    steps = {"engine": [], "linear": [], "attention": [], "fixed": []}
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
            "fixed": kernels.fixed_prefill(),
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
            steps["fixed"].append(kernels.fixed_step(i))
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
        fixed=piece("fixed", prefill["fixed"]),
        prefix=prefill["prefix"],
        suffix=prefill["suffix"],
        tokens=[tokens[r.id] for r in refs],
    )
