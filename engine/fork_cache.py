"""The forked KV cache: each prefix stored once per group, each arm in its own static suffix slots.

Layout, per attention layer:

- **prefix** `[G, kv, T, D]`: one entry per prefix group (problem), preallocated for the longest
  prefix and written chunk by chunk in the prefix phase. Full-attention layers keep the whole
  padded prefix (T = longest prefix). Sliding-window layers are cut down to the last W-1
  positions of each group once the prefix is complete: all that a later query can see.
- **suffix** `[N, kv, S_cap, D]`: one row per arm, preallocated for the arm's suffix plus its new
  tokens and written by index (gpt-fast style). A finished arm keeps its row; it simply stops being
  scheduled.

`update` returns a handle (`PrefixKV` or `ArmKV`) instead of tensors. HF passes it untouched to the attention function
(`shared_prefix_attention`), which reads the prefix once for all arms of a group and each arm's own
suffix, and merges the two by log-sum-exp. Gemma 4's KV-shared layers receive the producing layer's
handle, so the handle carries its storage rather than a layer index.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache

from nudgeability.engine.attention_layout import ArmStep, PrefixStep


@dataclass
class LayerKV:
    """The storage of one attention layer."""

    prefix_k: torch.Tensor | None = None  # [G, kv, T, D]
    prefix_v: torch.Tensor | None = None
    # [G] position of prefix slot 0 (negative: leading slots invalid)
    prefix_start: torch.Tensor | None = None
    suffix_k: torch.Tensor | None = None  # [N, kv, S_cap, D]
    suffix_v: torch.Tensor | None = None


@dataclass(frozen=True)
class PrefixKV:
    """What `ForkCache.update` returns in the prefix phase: the keys/values this chunk attends to,
    positions [key_start, chunk end)."""

    step: PrefixStep
    window: int | None
    keys: torch.Tensor
    values: torch.Tensor
    key_start: int


@dataclass(frozen=True)
class ArmKV:
    """What `ForkCache.update` returns in the arm phase: the layer's prefix and suffix storage, and
    in the packed suffix prefill the call's own keys/values `[1, kv, T, D]` (its tokens attend to
    each other within an arm)."""

    step: ArmStep
    layer: LayerKV
    window: int | None
    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None


class _LayerFlags:
    """What HF's mask code reads from `cache.layers` before it exits early for custom attention."""

    def __init__(self, is_sliding: bool):
        self.is_sliding = is_sliding


class ForkCache(Cache):
    """KV cache for one batch of prefix groups and their arms. See the module docstring."""

    def __init__(self, layer_windows: list[int | None], num_rows: int, suffix_capacity: int):
        super().__init__(layers=[_LayerFlags(w is not None) for w in layer_windows])
        self.windows = layer_windows
        self.storage = [LayerKV() for _ in layer_windows]
        self.num_rows = num_rows
        self.suffix_capacity = suffix_capacity
        self.ctx: PrefixStep | ArmStep | None = None  # the step of the current forward call

    # HF would derive positions from the cache length when none are given; with ragged arms that
    # silently gives wrong positions, so the engine always passes position_ids and this refuses.
    def get_seq_length(self, layer_idx: int = 0) -> int:
        raise RuntimeError("ForkCache has no single sequence length: pass position_ids explicitly")

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        ctx = self.ctx
        layer = self.storage[layer_idx]
        window = self.windows[layer_idx]
        if isinstance(ctx, ArmStep):
            self._write_suffix(layer, key_states, value_states, ctx)
            if ctx.packed:
                handle = ArmKV(ctx, layer, window, key_states, value_states)
            else:
                handle = ArmKV(ctx, layer, window)
        else:
            c0, c1 = ctx.chunk_start, ctx.chunk_start + key_states.shape[2]
            if layer.prefix_k is None:
                shape = (*key_states.shape[:2], ctx.prefix_max, key_states.shape[3])
                layer.prefix_k, layer.prefix_v = (
                    key_states.new_empty(shape),
                    value_states.new_empty(shape),
                )
                layer.prefix_start = torch.zeros_like(ctx.lengths)
            layer.prefix_k[:, :, c0:c1] = key_states
            layer.prefix_v[:, :, c0:c1] = value_states
            k0 = 0 if window is None else max(0, c0 - window + 1)
            keys, values = layer.prefix_k[:, :, k0:c1], layer.prefix_v[:, :, k0:c1]
            handle = PrefixKV(ctx, window, keys, values, key_start=k0)
        return handle, handle

    def finish_prefix(self, lengths: torch.Tensor) -> None:
        """Cut each sliding-window layer's prefix down to what later queries can see: the last
        W-1 positions of each group, [P_g - (W-1), P_g) (leading slots invalid when P_g < W-1)."""
        for layer, window in zip(self.storage, self.windows):
            if layer.prefix_k is None or window is None or window - 1 >= layer.prefix_k.shape[2]:
                continue
            k, v, tail = layer.prefix_k, layer.prefix_v, window - 1
            start = lengths - tail
            idx = (start[:, None] + torch.arange(tail, device=k.device)).clamp_min(0)
            idx = idx[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])
            layer.prefix_k, layer.prefix_v = k.gather(2, idx), v.gather(2, idx)
            layer.prefix_start = start

    def _write_suffix(self, layer: LayerKV, k: torch.Tensor, v: torch.Tensor, step: ArmStep):
        if layer.suffix_k is None:
            # Sized lazily: Gemma 4 layers differ in head count and head size.
            shape = (self.num_rows, k.shape[1], self.suffix_capacity, k.shape[3])
            layer.suffix_k = k.new_zeros(shape)
            layer.suffix_v = v.new_zeros(shape)
        # One index_copy_ per tensor into the storage seen as rows of D: the row of (arm r, head
        # h, slot s) is (r * kv + h) * S_cap + s. Cheaper to dispatch than advanced-index
        # assignment, and the index is built once per call and head count, not per layer.
        kv, cap, d = layer.suffix_k.shape[1], layer.suffix_k.shape[2], k.shape[3]
        key = ("write", kv, cap)
        index = step.per_call.get(key)
        if index is None:
            heads = torch.arange(kv, device=k.device)
            index = (step.write_rows[..., None] * kv + heads) * cap + step.write_slots[..., None]
            index = step.per_call[key] = index.reshape(-1)
        layer.suffix_k.view(-1, d).index_copy_(0, index, k.transpose(1, 2).reshape(-1, d))
        layer.suffix_v.view(-1, d).index_copy_(0, index, v.transpose(1, 2).reshape(-1, d))

    # --- accounting, used by the tests and the benchmarks ---------------------------------------
    def prefix_tensors(self) -> list[torch.Tensor]:
        """Every prefix key/value tensor held, one pair per attention layer that stores KV."""
        out = []
        for layer in self.storage:
            if layer.prefix_k is not None:
                out += [layer.prefix_k, layer.prefix_v]
        return out

    def suffix_tensors(self) -> list[torch.Tensor]:
        out = []
        for layer in self.storage:
            if layer.suffix_k is not None:
                out += [layer.suffix_k, layer.suffix_v]
        return out

    def nbytes(self) -> dict[str, int]:
        """Bytes held by prefix and suffix storage (each tensor counted once)."""
        return {
            "prefix": sum(t.untyped_storage().nbytes() for t in self.prefix_tensors()),
            "suffix": sum(t.untyped_storage().nbytes() for t in self.suffix_tensors()),
        }
