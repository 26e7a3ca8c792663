"""Whether a step's row tokens and prefix chunks run the paged kernel (paged_attention.py): the
one place the engine asks (engine.py for the eager steps, attention/static_dispatch.py for the
fixed-shape decode's buffers).

On where the runner computes with the invariant Triton kernels (`ModelRunner.invariance ==
"triton"`, which `Engine(invariance="triton")` sets: on CUDA, or forced onto CPU tensors); off,
the eager cascade keeps its library kernels (attention/shared_prefix_attention.py).
"""

from __future__ import annotations

TRITON = "triton"  # `Engine(invariance=TRITON)`: the invariant Triton kernels (model_runner.py)


def paged_on(runner) -> bool:
    """The runner's invariant Triton branch (a runner without the option has none)."""
    return getattr(runner, "invariance", None) == TRITON


def paged_tokens(runner) -> int | None:
    """Tokens per tile of the paged kernel for this runner's model when the kernel is on, else
    None: `paged_attention.tile_tokens` of the model's GQA ratio (query heads per KV head)."""
    if not paged_on(runner):
        return None
    from nudgeability.engine.invariant.cuda.paged_attention import tile_tokens

    text = runner.model.config.get_text_config()
    heads = text.num_attention_heads
    return tile_tokens(heads // (getattr(text, "num_key_value_heads", None) or heads))
