"""Runs an HF decoder on a `PoolCache` and turns the chosen hidden states into logits.

`ROW_MULTIPLE`: every forward and every LM-head call runs a multiple of this many rows (pad rows
added). On this project's CPU (MKL sgemm, fp32) a row's matrix product takes one of three code
paths by the number of rows (1; 2-15; 16 and more), and rows agree bit for bit only within a path;
and the vectorised elementwise kernels (exp, sigmoid, cos, ...) compute the last elements of a
tensor with a scalar loop, whose results can differ from the vector code in the last bit. With
16 rows at least, and a multiple of 16, every row takes the same path at any batch size and none
of its elements fall in a scalar tail: a row's logits do not depend on what else is in the batch
(engine/README.md). It is also faster from 4 to 15 rows, where MKL's middle path is slow.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from nudgeability.engine import shared_prefix_attention
from nudgeability.engine.errors import UnsupportedModelError
from nudgeability.engine.kv_cache import PoolCache

ROW_MULTIPLE = 16


class ModelRunner:
    """A thin wrapper over an HF causal LM: decoder forward with our cache, then the LM head.

    Only the rows' last hidden states go through the LM head, so a long prefill never builds a
    `[tokens, vocab]` logits tensor.
    """

    def __init__(self, model: torch.nn.Module, row_multiple: int = ROW_MULTIPLE):
        self.model = model
        self.row_multiple = row_multiple
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
        self, cache: PoolCache, input_ids: torch.Tensor, position_ids: torch.Tensor
    ) -> torch.Tensor:
        """Hidden states [B, L, hidden] of `input_ids` at `position_ids`, reading and writing `cache`."""
        out = self.decoder(
            input_ids=input_ids, position_ids=position_ids, cache=cache, use_cache=True
        )
        return out.last_hidden_state

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """fp32 logits [n, vocab] of hidden states [n, hidden], with the model's final soft-capping.

        Soft-capping runs in the model dtype before the cast, exactly as the HF model does. The
        rows are padded with zeros to a multiple of `row_multiple` (module docstring).
        """
        n = hidden.shape[0]
        pad = -(-n // self.row_multiple) * self.row_multiple - n
        if pad:
            hidden = torch.cat([hidden, hidden.new_zeros(pad, hidden.shape[1])])
        logits = self.lm_head(hidden)
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits[:n].float()
