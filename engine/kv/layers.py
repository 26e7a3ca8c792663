"""What each decoder layer keeps in the KV cache, read from the model's own modules: the KV pool's
layer specs (reservation.py) and the bandwidth floor's KV bytes (costs/floor.py) both count it."""

from __future__ import annotations

import torch


def activation_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype the model computes (and caches K/V) in: its input embedding's, which a quantised
    checkpoint keeps in full precision (`model.dtype` can be a quantised weight's)."""
    return model.get_input_embeddings().weight.dtype


def layer_kv_widths(model: torch.nn.Module) -> list[tuple[int, int | None, bool]]:
    """Per decoder layer: (K+V values per slot, the layer's window or None, whether it stores KV).

    Read from the attention modules themselves (`k_proj.out_features` is kv_heads x head_dim,
    quantised layers included), not from the config, whose per-layer fields differ between
    families and transformers releases (Gemma 4's full layers have their own head size). A
    layer with no `k_proj` (Gemma 4's KV-shared layers) reads the KV of the last earlier layer of
    its kind and stores none."""
    out: list[tuple[int, int | None, bool]] = []
    last: dict[bool, int] = {}
    for layer in model.get_decoder().layers:
        attn = layer.self_attn
        window = getattr(attn, "sliding_window", None)
        k_proj = getattr(attn, "k_proj", None)
        if k_proj is not None:
            width = 2 * k_proj.out_features
            last[window is not None] = width
            out.append((width, window, True))
        else:
            out.append((last[window is not None], window, False))
    return out
