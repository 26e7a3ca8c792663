"""Runs an HF decoder on a `PoolCache` and turns the chosen hidden states into logits.

Batch invariance (engine/README.md; which products a run takes: `invariance_of`): every forward
and every LM-head call runs at least `MIN_ROWS` rows, and a multiple of `ROW_MULTIPLE` (pad rows
added). On this project's CPU (MKL sgemm, fp32) a row's matrix product takes one of three code
paths by the number of rows (1; 2-15; 16 and more), and rows agree bit for bit only within a path; 16 rows or more keep every row
on the last one (and from 4 to 15 rows that is also faster). ATen's vectorised elementwise kernels
(exp, sigmoid, cos, ...) compute a tensor's last elements with a scalar loop, whose results can
differ from the vector code in the last bit: the row multiple makes every per-token tensor (the
narrowest is a head's rotary part) a whole number of vector iterations, so that no token's
elements fall in that tail.
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager, nullcontext

import torch

from nudgeability.engine.attention import shared_prefix_attention
from nudgeability.engine.errors import UnsupportedModelError
from nudgeability.engine.fused import first_step
from nudgeability.engine.fused import layers as fused_layers
from nudgeability.engine.invariant.cpu.weights import TILE_ROWS, forget_reordered
from nudgeability.engine.invariant.cuda.mode import TRITON
from nudgeability.engine.invariant.linears import adopt, invariant_forward
from nudgeability.engine.kv.kv_cache import PoolCache
from nudgeability.models.quant import self_check
from nudgeability.util import fallbacks
from nudgeability.util.heap import hold_freed_heap, release_freed_heap

MIN_ROWS = 16
# Rows per forward are a multiple of this: the products' tile (engine/invariant/cpu/products.py), so that no
# product pads again; it also makes every per-token tensor whose width is a multiple of 2 (every
# width in the supported models) fill whole iterations of ATen's 32-element fp32 loops, so that
# no token's elements fall in the scalar tail (module docstring).
ROW_MULTIPLE = TILE_ROWS
# After a CPU forward of at least this many tokens the freed heap is handed back (util/heap.py):
# its activations stay resident as free heap that the steps after it, of a few rows each, may
# not need again. Few steps qualify, and each pays milliseconds for the trim and for mapping
# again the pages the next such step writes, against far more compute.
TRIM_TOKENS = 128
LIBRARY_LAYERS = "the library's own layer modules"


INVARIANCES = (None, TRITON)


def invariance_of(batch_invariant: bool, device_type: str, invariance: str | None) -> str | None:
    """Which batch-invariant products a run computes with, decided here alone: "cpu" (the CPU
    construction, engine/invariant/cpu/) for a batch-invariant run on CPU, TRITON (the Triton
    GEMMs of engine/invariant/cuda/) where the run asks for it (`Engine(invariance="triton")`: on
    CUDA, or forced onto CPU tensors), None (the library's, CUDA's default) otherwise."""
    if invariance not in INVARIANCES:
        raise ValueError(f"invariance={invariance!r} is not one of {INVARIANCES}")
    if invariance == TRITON and not batch_invariant:
        raise ValueError("invariance='triton' needs batch_invariant=True")
    if invariance == TRITON:
        return TRITON
    return "cpu" if batch_invariant and device_type == "cpu" else None


@contextmanager
def _both(invariant):
    """`invariant` and the fused layer kernels together: a fused layer's projections are the
    adopted linears, so both must be open around the forward."""
    with invariant, fused_layers.fused_forward():
        yield


class ModelRunner:
    """A thin wrapper over an HF causal LM: decoder forward with our cache, then the LM head.

    Only the rows' last hidden states go through the LM head, so a long prefill never builds a
    `[tokens, vocab]` logits tensor.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        batch_invariant: bool = True,
        fused: bool = True,
        invariance: str | None = None,
    ):
        self.model = model
        self.batch_invariant = batch_invariant
        forget_reordered(model.parameters())  # weights written since a copy was made are seen
        device_type = next(model.parameters()).device.type
        self.invariance = invariance_of(batch_invariant, device_type, invariance)
        if self.invariance is not None:
            # its linears run the invariant products inside `_products`
            adopt(model, triton=self.invariance == TRITON)
        # on CUDA a layer's norms, activation and rotary run as Triton kernels inside `_products`
        # (engine/fused/); never on CPU, whose records are the invariant construction's
        self.fused = fused and device_type == "cuda" and fused_layers.adopt(model)
        self._fused_checked = False
        self._checking = False  # inside `checking`: the probe's forwards (engine/kernel_checks.py)
        self.min_rows = MIN_ROWS if batch_invariant else 1
        self.row_multiple = ROW_MULTIPLE if batch_invariant else 1
        self.decoder = model.get_decoder()
        self.lm_head = model.get_output_embeddings()
        # a head kept in oneDNN's layout has no `weight` (engine/invariant/cpu/reordered.py)
        self.vocab_size = (
            getattr(self.lm_head, "out_features", None) or self.lm_head.weight.shape[0]
        )
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
        if self.device.type == "cpu":
            hold_freed_heap()  # freed activations reused, not faulted in again (util/heap.py)
        self._previous = config._attn_implementation
        # transformers 5.24 names the decoder's cache argument `cache`; earlier 5.x releases
        # (5.17, on the GPU machine) name it `past_key_values`
        parameters = inspect.signature(self.decoder.forward).parameters
        self._cache_arg = "cache" if "cache" in parameters else "past_key_values"

    def padded(self, rows: int) -> int:
        """The rows a forward of `rows` rows runs (module docstring)."""
        return max(self.min_rows, -(-rows // self.row_multiple) * self.row_multiple)

    def on_device(self):
        """The model's CUDA device as the current one for the duration, nothing off CUDA: the
        streams, events and graphs torch makes, and Triton's launches, go to the current device,
        so an engine on cuda:1 steps inside this (`Engine.step`, `Engine.capture`)."""
        return torch.cuda.device(self.device) if self.device.type == "cuda" else nullcontext()

    def engage(self) -> None:
        """Switch the model to shared-prefix attention (until `disengage`); cheap when it already is.

        The engine keeps it switched while it has work (switching costs a little each time),
        so run the model's own forward between engine steps inside `own_attention()`."""
        if self.model.config._attn_implementation != shared_prefix_attention.NAME:
            self._previous = self.model.config._attn_implementation
            self.model.set_attn_implementation(shared_prefix_attention.NAME)

    def disengage(self) -> None:
        """Give the model back the attention it had before `engage`."""
        if self.model.config._attn_implementation == shared_prefix_attention.NAME:
            self.model.set_attn_implementation(self._previous)

    @contextmanager
    def warming(self):
        """Forwards of pad tokens at position 0 for the duration (the fixed-shape decode's capture
        warm-up): no quantised kernel gets its verdict from them (models/quant/self_check.py)."""
        with self_check.deferred():
            yield

    @contextmanager
    def checking(self):
        """The probe's forwards before the run (engine/kernel_checks.py) for the duration: the
        first conclusive one checks the fused layer kernels (`_checked_fused_forward`); no other
        forward does."""
        self._checking = True
        try:
            yield
        finally:
            self._checking = False

    @property
    def unchecked(self) -> bool:
        """Whether the fused layer kernels still wait for their check (`checking`)."""
        return self.fused and not self._fused_checked

    @contextmanager
    def own_attention(self):
        """The model's own attention for the duration (e.g. an HF forward between engine steps)."""
        engaged = self.model.config._attn_implementation == shared_prefix_attention.NAME
        self.disengage()
        try:
            yield
        finally:
            if engaged:
                self.engage()

    def forward(
        self, cache: PoolCache, input_ids: torch.Tensor, position_ids: torch.Tensor
    ) -> torch.Tensor:
        """Hidden states [B, L, hidden] of `input_ids` at `position_ids`, reading and writing `cache`."""
        if self._checking and self.unchecked and self._may_check():
            return self._checked_fused_forward(cache, input_ids, position_ids)
        with self._products():
            out = self.decoder(
                input_ids=input_ids,
                position_ids=position_ids,
                use_cache=True,
                **{self._cache_arg: cache},
            )
        if (
            input_ids.numel() >= TRIM_TOKENS
            and self.device.type == "cpu"
            and not torch.compiler.is_compiling()
        ):
            release_freed_heap()
        return out.last_hidden_state

    @staticmethod
    def _may_check() -> bool:
        if torch.compiler.is_compiling():
            return False
        return not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())

    def _checked_fused_forward(self, cache, input_ids, position_ids) -> torch.Tensor:
        """A probe's forward with the fused layer kernels, checked against the library's own
        forward of the same tokens (engine/fused/first_step.py: hidden states, greedy ids and
        margins), until one such forward was conclusive (real tokens past position 0). The
        library's runs second, so the KV the probe's scratch blocks keep is its; on a
        disagreement the runner computes without the fused kernels from then on, recorded
        (util.fallbacks)."""
        args = {"input_ids": input_ids, "position_ids": position_ids, "use_cache": True}
        with self._triton():  # both forwards on the run's products (its K/V: the second's)
            with fused_layers.fused_forward():
                fused = self.decoder(**args, **{self._cache_arg: cache}).last_hidden_state
            reference = self.decoder(**args, **{self._cache_arg: cache}).last_hidden_state
        why = first_step.disagreement(fused, reference, self.logits)
        if why is not None:
            fallbacks.record("fused layer kernels (engine/fused/)", LIBRARY_LAYERS, why)
            self.fused = False
        self._fused_checked = why is not None or first_step.conclusive(input_ids, position_ids)
        return reference

    def _products(self):
        """The run's matrix products (`invariance_of`): on the CPU construction the invariant
        ones alone (engine/invariant/linears.py); the Triton ones with the fused layer kernels
        where the runner has them (engine/fused/layers.py), both contexts open; else the
        library's, with the fused layer kernels on CUDA."""
        if self.invariance == "cpu":
            return invariant_forward()
        if not self.fused:
            return self._triton()
        if self.invariance is None:
            return fused_layers.fused_forward()
        return _both(self._triton())

    def _triton(self):
        """The Triton invariant products' context where the run has them, else none."""
        return invariant_forward(triton=True) if self.invariance == TRITON else nullcontext()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """fp32 logits [n, vocab] of hidden states [n, hidden], with the model's final soft-capping.

        Soft-capping runs in the model dtype before the cast, exactly as the HF model does. The
        rows are padded with zeros as a forward's are (module docstring).
        """
        n = hidden.shape[0]
        pad = self.padded(n) - n
        if pad:
            hidden = torch.cat([hidden, hidden.new_zeros(pad, hidden.shape[1])])
        with self._products():
            logits = self.lm_head(hidden)
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits[:n].float()
