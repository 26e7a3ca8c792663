"""The HF `Cache` the engine passes to the model: it writes each layer's keys and values into the
`KVPool` and hands the attention a handle instead of tensors.

Attention modules call `cache.update(key_states, value_states, layer_idx)` and pass whatever it
returns straight to the attention function (`shared_prefix_attention`), which nothing else reads
(`engine/README.md`, the HF hooks). So `update` writes the step's keys (every token of the step,
at the slots `StepLayout` chose) and returns a `LayerKV`: the layer's pool storage and the step's
layout. Gemma 4's KV-shared layers never call `update`; they receive the producing layer's handle,
which is why the handle carries its storage rather than a layer index.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache

from nudgeability.engine.kv.kv_pool import KVPool
from nudgeability.engine.scheduling.step_layout import StepLayout


@dataclass(frozen=True)
class LayerKV:
    """One layer's keys and values `[kv, slots, D]` in the pool, and the step they serve."""

    layout: StepLayout
    k: torch.Tensor
    v: torch.Tensor
    window: int | None

    def to(self, device, *args, **kwargs) -> LayerKV:
        """The handle itself: transformers 5.17's Gemma 4 moves a KV-shared layer's states to the
        query's device (`key_states.to(query_states.device)`); the pool lives on that device."""
        if torch.device(device) != self.k.device:
            raise RuntimeError(f"the KV pool is on {self.k.device}, not {device}")
        return self


class _LayerFlags:
    """What HF's mask code reads from `cache.layers` before it exits early for custom attention."""

    def __init__(self, is_sliding: bool):
        self.is_sliding = is_sliding


class PoolCache(Cache):
    """The engine's cache over one `KVPool`; `layout` is set before each forward call."""

    def __init__(self, pool: KVPool, layer_windows: list[int | None]):
        super().__init__(layers=[_LayerFlags(w is not None) for w in layer_windows])
        self.pool = pool
        self.windows = layer_windows
        self.layout: StepLayout | None = None

    # HF would derive positions from the cache length when none are given; with rows of different
    # lengths that silently gives wrong positions, so the engine always passes position_ids.
    def get_seq_length(self, layer_idx: int = 0) -> int:
        raise RuntimeError("PoolCache has no single sequence length: pass position_ids explicitly")

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        _, kv, _, d = key_states.shape
        k, v = self.pool.layer(layer_idx, kv, d, key_states.dtype)
        index = self.layout.write_index(kv, k.shape[1])
        # The pool seen as rows of D: one index_copy_ per tensor, the index built once per step.
        k.view(-1, d).index_copy_(0, index, key_states.transpose(1, 2).reshape(-1, d))
        v.view(-1, d).index_copy_(0, index, value_states.transpose(1, 2).reshape(-1, d))
        handle = LayerKV(self.layout, k, v, self.windows[layer_idx])
        return handle, handle
