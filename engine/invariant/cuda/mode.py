"""Whether a step's row tokens and prefix chunks run the paged kernel (paged_attention.py): the
one place the engine asks, so that the runner's invariant-kernels switch is read in one spot.

On when the model runner says its invariant CUDA kernels are in use (`runner.invariant_cuda`,
set by the runner's option; the tests set it on CPU tensors to run the kernel in Triton's
interpreter). Off, the eager cascade keeps its library kernels (shared_prefix_attention.py).
"""

from __future__ import annotations


def paged_tokens(runner) -> int | None:
    """Tokens per tile of the paged kernel for this runner's model when the kernel is on, else
    None: `paged_attention.tile_tokens` of the model's GQA ratio (query heads per KV head)."""
    if not getattr(runner, "invariant_cuda", False):
        return None
    from nudgeability.engine.invariant.cuda.paged_attention import tile_tokens

    text = runner.model.config.get_text_config()
    heads = text.num_attention_heads
    return tile_tokens(heads // (getattr(text, "num_key_value_heads", None) or heads))
