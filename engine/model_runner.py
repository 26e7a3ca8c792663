"""Runs an HF decoder on a `ForkCache` and turns the chosen hidden states into logits."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from nudgeability.engine import shared_prefix_attention
from nudgeability.engine.errors import UnsupportedModelError
from nudgeability.engine.fork_cache import ForkCache


class ModelRunner:
    """A thin wrapper over an HF causal LM: decoder forward with our cache, then the LM head.

    Only the rows' last hidden states go through the LM head, so a long prefill never builds a
    `[tokens, vocab]` logits tensor.
    """

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.decoder = model.get_decoder()
        self.lm_head = model.get_output_embeddings()
        config = model.config
        self.softcap = getattr(config, "final_logit_softcapping", None)
        if getattr(config, "attn_logit_softcapping", None):
            raise UnsupportedModelError(
                f"{config.model_type}: attention logit soft-capping is not supported by the engine"
            )
        types = (
            getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
        )
        window = getattr(config, "sliding_window", None)
        self.layer_windows = [window if t == "sliding_attention" else None for t in types]
        self.max_positions = getattr(config, "max_position_embeddings", None)
        first = next(model.parameters())
        self.device = first.device

    @contextmanager
    def fork_attention(self):
        """Switch the model to shared-prefix attention for the duration, then restore it."""
        previous = self.model.config._attn_implementation
        self.model.set_attn_implementation(shared_prefix_attention.NAME)
        try:
            yield
        finally:
            self.model.set_attn_implementation(previous)

    def forward(
        self, cache: ForkCache, input_ids: torch.Tensor, position_ids: torch.Tensor
    ) -> torch.Tensor:
        """Hidden states [B, L, hidden] of `input_ids` at `position_ids`, reading and writing `cache`."""
        out = self.decoder(
            input_ids=input_ids, position_ids=position_ids, cache=cache, use_cache=True
        )
        return out.last_hidden_state

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """fp32 logits [n, vocab] of hidden states [n, hidden], with the model's final soft-capping.

        Soft-capping runs in the model dtype before the cast, exactly as the HF model does.
        """
        logits = self.lm_head(hidden)
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits.float()
