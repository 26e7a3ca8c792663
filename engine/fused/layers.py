"""How an HF decoder's layers reach the fused kernels: their classes swapped, and a context.

`fuse(model)` swaps, in place, the class of every module it knows (as engine/invariant/linears.py
swaps a model's linears: the same Parameters, nothing of torch or transformers reassigned) for a
subclass whose forward calls triton_ops.py, but only inside `fused_forward()`, the context the
model runner enters around each forward on CUDA. Outside it (HF `generate` on the same model,
a reference forward) every module computes as before. What each family gets:

- RMSNorms (Qwen3, GLM-4, Llama: weight times the rounded normed row; Gemma 4: the product in
  fp32, its value norm without a weight): one launch each, the per-head q/k norms included (the
  same kernel over the last dim);
- MLPs whose activation is SiLU (Qwen3, GLM-4's fused gate_up projection, Llama) or GELU's tanh
  form (Gemma 4): act(gate) * up in one launch; any other activation stays eager;
- Qwen3, GLM-4 and Llama attention: each of q and k is one launch from the projection to the
  rotated heads (Qwen3: the head norm then `rotate_half`; GLM-4: interleaved pairs on a partial
  rotary width; Llama: `rotate_half`); the rest of the forward is HF's, line for line, in both
  cache conventions (transformers >= 5.24 names the cache `cache` and passes the kwargs to
  `update`, 5.17 names it `past_key_values`);
- Qwen3, GLM-4 and Llama decoder layers: the residual add and the post-attention norm in one
  launch, which returns the new residual too.

Gemma 4's attention (per-tensor rotary, KV sharing) and decoder layer (per-layer inputs, a
second MLP branch, layer scalars) stay HF's: only their norms and MLP are swapped.

Nothing leaves the fused path quietly: a module that takes HF's forward for its dtypes (head
norms kept in fp32, a mixed-dtype residual) records it, and a kernel this device cannot launch
(`fallbacks.launch_errors`: Triton's shared memory or ptxas refusal) is recorded once, after
which every swapped module runs HF's forward (`_launch`); both land in the run's manifest.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from nudgeability.engine.fused import triton_ops as ops
from nudgeability.util import fallbacks

FALLBACK_PATH = "fused layer kernels (engine/fused)"
EAGER_OPS = "the HF modules' eager ops"
_depth = 0  # how many `fused_forward` contexts are open (re-entrant)
_failed = False  # a fused kernel could not launch on this device: HF's forward from then on


def active() -> bool:
    """Whether the swapped modules now call the fused kernels (inside `fused_forward`, and no
    kernel has failed to launch)."""
    return _depth > 0 and not _failed


def _launch(op, *args, **kwargs):
    """`op(*args, **kwargs)` (a triton_ops wrapper), or None where its kernel cannot launch on
    this device: recorded, and every swapped module runs HF's forward from then on (a kernel
    that fails at one shape is not tried at the next, mid-step or under a graph capture)."""
    global _failed
    try:
        return op(*args, **kwargs)
    except fallbacks.launch_errors() as error:
        _failed = True
        name = getattr(op, "__name__", str(op))
        fallbacks.record(f"{FALLBACK_PATH}: {name}", EAGER_OPS, f"{type(error).__name__}: {error}")
        return None


def _bypass(module: torch.nn.Module, used: str, reason: str) -> None:
    """Record that a swapped `module` takes HF's forward (`used`) for its dtypes."""
    fallbacks.record(f"{FALLBACK_PATH}: {type(module).__name__}", used, reason)


@contextmanager
def fused_forward() -> Iterator[None]:
    """The swapped modules run the fused kernels for the duration; re-entrant."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1


class _Fused:
    """Marks a swapped class; `fuse` leaves its instances alone."""


def _eps(norm: torch.nn.Module) -> float:
    """An HF RMSNorm's epsilon: `variance_epsilon`, or `eps` (Gemma 4 in transformers 5.17)."""
    eps = getattr(norm, "variance_epsilon", None)
    return norm.eps if eps is None else eps


class _CastThenScaleNorm(_Fused):
    """Qwen3RMSNorm, Glm4RMSNorm, LlamaRMSNorm: weight * (x / rms(x)).to(dtype)."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        out = _launch(ops.rms_norm, hidden_states, self.weight, _eps(self)) if active() else None
        return super().forward(hidden_states) if out is None else out


class _ScaleThenCastNorm(_Fused):
    """Gemma4RMSNorm: (x / rms(x) * weight) in fp32, then the dtype; no weight without scale."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if not active():
            return super().forward(hidden_states)
        weight = self.weight if self.with_scale else None
        out = _launch(ops.rms_norm, hidden_states, weight, _eps(self), ops.SCALE_THEN_CAST)
        return super().forward(hidden_states) if out is None else out


class _GateUpMLP(_Fused):
    """down(act(gate(x)) * up(x)) (Qwen3MLP, LlamaMLP, Gemma4TextMLP)."""

    _act = ops.SILU

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not active():
            return super().forward(x)
        product = _launch(ops.act_mul, self.gate_proj(x), self.up_proj(x), self._act)
        return super().forward(x) if product is None else self.down_proj(product)


class _GeluGateUpMLP(_GateUpMLP):
    _act = ops.GELU_TANH


class _FusedGateUpMLP(_Fused):
    """Glm4MLP: one gate_up projection, gate its first half; down(up * silu(gate))."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if not active():
            return super().forward(hidden_states)
        gate, up = self.gate_up_proj(hidden_states).chunk(2, dim=-1)
        product = _launch(ops.act_mul, gate, up)  # up * silu(gate): the same product
        return super().forward(hidden_states) if product is None else self.down_proj(product)


class _RotaryAttention(_Fused):
    """Qwen3Attention, Glm4Attention, LlamaAttention: HF's forward with q and k each one kernel
    from the projection to the rotated heads (`triton_ops.norm_rope`)."""

    _head_norm = True  # Qwen3's q_norm, k_norm (weight dtype = activations' dtype)
    _interleaved = False  # GLM-4's pairs (2j, 2j + 1)
    # set by `fuse` from the HF class: its cache convention (module docstring), and its module,
    # whose attention functions the forward looks up as HF's does
    _new_cache = True
    _modeling = None

    def forward(self, hidden_states, position_embeddings, attention_mask=None, *args, **kwargs):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        cos, sin = position_embeddings
        query_states = key_states = None
        # before anything reaches the cache, so that HF's forward can still take the step
        if active() and not args and self._fits(hidden_states):
            query_states = self._rotated(
                self.q_proj(hidden_states).view(hidden_shape), cos, sin, "q"
            )
        if query_states is not None:
            key_states = self._rotated(self.k_proj(hidden_states).view(hidden_shape), cos, sin, "k")
        if key_states is None:
            return super().forward(
                hidden_states, position_embeddings, attention_mask, *args, **kwargs
            )
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cache = kwargs.pop("cache", None)
        if cache is None:  # the old name, which 5.24+ layers translate before calling this
            cache = kwargs.pop("past_key_values", None)
        if cache is not None and self._new_cache:
            key_states, value_states = cache.update(
                key_states, value_states, self.layer_idx, kwargs=kwargs
            )
        elif cache is not None:
            key_states, value_states = cache.update(key_states, value_states, self.layer_idx)
        attention_interface = self._modeling.ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, self._modeling.eager_attention_forward
        )
        if hasattr(self, "sliding_window"):  # Qwen3 passes its window; GLM-4 has none
            kwargs["sliding_window"] = self.sliding_window
        attn_output, attn_weights = attention_interface(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            **kwargs,
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), attn_weights

    def _fits(self, hidden_states: torch.Tensor) -> bool:
        """The kernel keeps HF's rounding of the head norm only with weights in the activations'
        dtype; a model that keeps its norms in fp32 takes HF's forward."""
        if not self._head_norm:
            return True
        dtype = hidden_states.dtype
        if self.q_norm.weight.dtype == dtype and self.k_norm.weight.dtype == dtype:
            return True
        _bypass(
            self,
            "the HF attention forward",
            f"its head norms' weights are {self.q_norm.weight.dtype}, the activations {dtype}",
        )
        return False

    def _rotated(self, x: torch.Tensor, cos, sin, which: str) -> torch.Tensor | None:
        """[B, L, H, D] projections to HF's [B, H, L, D] rotated heads (a view, as HF's are);
        None where the kernel cannot launch (`_launch`)."""
        norm = getattr(self, f"{which}_norm") if self._head_norm else None
        out = _launch(
            ops.norm_rope,
            x,
            cos,
            sin,
            norm.weight if norm is not None else None,
            _eps(norm) if norm is not None else 0.0,
            self._interleaved,
        )
        return None if out is None else out.transpose(1, 2)


class _InterleavedAttention(_RotaryAttention):
    _head_norm = False
    _interleaved = True


class _PlainRotaryAttention(_RotaryAttention):
    """LlamaAttention: `rotate_half`, no head norm."""

    _head_norm = False


class _ResidualNormLayer(_Fused):
    """A decoder layer whose residual add and post-attention norm are one kernel (Qwen3, Llama;
    GLM-4 with its extra norms after attention and MLP, `_sandwich`)."""

    _sandwich = False

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        norm = self.post_attention_layernorm
        if not active() or args or not isinstance(norm, _CastThenScaleNorm):
            return super().forward(hidden_states, *args, **kwargs)
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states=hidden_states, **kwargs)
        if self._sandwich:
            hidden_states = self.post_self_attn_layernorm(hidden_states)
        fused = None
        if hidden_states.dtype != residual.dtype:  # a mixed-dtype add promotes: HF's rule
            why = f"its attention output is {hidden_states.dtype}, the residual {residual.dtype}"
            _bypass(self, "HF's residual add and norm", why)
        elif active():  # not if a kernel of this layer has failed to launch
            fused = _launch(ops.rms_norm, hidden_states, norm.weight, _eps(norm), residual=residual)
        if fused is None:
            residual = residual + hidden_states
            hidden_states = norm(residual)
        else:
            hidden_states, residual = fused
        hidden_states = self.mlp(hidden_states)
        if self._sandwich:
            hidden_states = self.post_mlp_layernorm(hidden_states)
        return residual + hidden_states


class _SandwichLayer(_ResidualNormLayer):
    _sandwich = True


# HF class name -> the behaviour its fused subclass adds. Matched by exact class (and only in
# transformers' own modeling modules), so a subclass of a user's own is never swapped.
SWAPS: dict[str, type[_Fused]] = {
    "Qwen3RMSNorm": _CastThenScaleNorm,
    "Glm4RMSNorm": _CastThenScaleNorm,
    "LlamaRMSNorm": _CastThenScaleNorm,
    "Gemma4RMSNorm": _ScaleThenCastNorm,
    "Qwen3MLP": _GateUpMLP,
    "LlamaMLP": _GateUpMLP,
    "Gemma4TextMLP": _GeluGateUpMLP,
    "Glm4MLP": _FusedGateUpMLP,
    "Qwen3Attention": _RotaryAttention,
    "Glm4Attention": _InterleavedAttention,
    "LlamaAttention": _PlainRotaryAttention,
    "Qwen3DecoderLayer": _ResidualNormLayer,
    "LlamaDecoderLayer": _ResidualNormLayer,
    "Glm4DecoderLayer": _SandwichLayer,
}
SILU_NAMES = {"SiLUActivation", "SiLU"}
GELU_TANH_NAMES = {"GELUTanh", "PytorchGELUTanh"}
_classes: dict[type, type] = {}


def _fits(module: torch.nn.Module, behaviour: type[_Fused]) -> bool:
    """Whether `module` computes what `behaviour` assumes (an MLP's activation)."""
    if behaviour is _FusedGateUpMLP:
        return type(module.activation_fn).__name__ in SILU_NAMES
    if behaviour is _GeluGateUpMLP:
        return type(module.act_fn).__name__ in GELU_TANH_NAMES
    if behaviour is _GateUpMLP:
        return type(module.act_fn).__name__ in SILU_NAMES
    return True


def _fused_class(base: type, behaviour: type[_Fused]) -> type:
    if base not in _classes:
        attrs = {}
        if issubclass(behaviour, _RotaryAttention):
            attrs["_new_cache"] = "cache" in inspect.signature(base.forward).parameters
            attrs["_modeling"] = sys.modules[base.__module__]
        _classes[base] = type(f"Fused{base.__name__}", (behaviour, base), attrs)
    return _classes[base]


def fuse(model: torch.nn.Module) -> int:
    """Swap the classes of `model`'s modules that have a fused form (module docstring); returns
    how many changed (0 the second time). Their Parameters and buffers are untouched."""
    changed = 0
    for module in model.modules():
        base = type(module)
        behaviour = SWAPS.get(base.__name__)
        if (
            behaviour is None
            or isinstance(module, _Fused)
            or not base.__module__.startswith("transformers.models.")
            or not _fits(module, behaviour)
        ):
            continue
        module.__class__ = _fused_class(base, behaviour)
        changed += 1
    return changed


def adopt(model: torch.nn.Module) -> bool:
    """`fuse(model)` where Triton imports (the model runner calls it for a CUDA model); without
    Triton the model keeps HF's eager modules, recorded as a fallback (util/fallbacks.py)."""
    if not ops.available():
        fallbacks.record(FALLBACK_PATH, EAGER_OPS, "triton is not importable")
        return False
    fuse(model)
    return True
