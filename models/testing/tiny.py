"""Tiny random-weight models of every architecture the engine supports.

They stand in for the real checkpoints in the tests, the benchmarks and the quantisation writers'
examples: same model classes, same code paths (GQA, q/k norms, sliding windows, KV sharing,
per-layer inputs, partial and proportional RoPE), a few hundred kilobytes of weights.
"""

from __future__ import annotations

import torch
from transformers import (
    Gemma4ForCausalLM,
    Gemma4TextConfig,
    Glm4Config,
    Glm4ForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    Qwen3Config,
    Qwen3ForCausalLM,
)

ARCHITECTURES = ("llama", "qwen3", "glm4", "gemma4")


def decoder_sizes(
    hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int, **more
) -> dict:
    """The config fields that size a decoder's layers (names as in the HF configs), and `more`."""
    return dict(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        **more,
    )


# The GPU check's dry run (benchmarks/gpu_check.py --dry-run): a tiny Qwen3 whose linears the
# W4A16 (groups of 128) and FP8 (128 x 128 blocks) packings take; one shape for its engine and
# quant sections (benchmarks/benchkit/gpu/engine.py, benchmarks/benchkit/gpu/quant.py).
QUANT_PACKABLE_QWEN3 = decoder_sizes(128, 256, 4, 2, 32, num_hidden_layers=2, vocab_size=512)

_COMMON = decoder_sizes(64, 128, 4, 2, 16, max_position_embeddings=4096, rms_norm_eps=1e-6)


def tiny_config(arch: str, vocab_size: int = 320, num_layers: int = 4, **overrides):
    """Config of a tiny `arch` model ('llama', 'qwen3', 'glm4', 'gemma4').

    Gemma 4 gets every feature of the real E2B/E4B switched on: alternating sliding-window
    (window 16) and full layers, the last two layers KV-shared, per-layer input embeddings, a
    larger global head dimension and proportional RoPE on the full layers.
    """
    if arch == "llama":
        cfg = LlamaConfig(vocab_size=vocab_size, num_hidden_layers=num_layers, **_COMMON)
    elif arch == "qwen3":
        cfg = Qwen3Config(vocab_size=vocab_size, num_hidden_layers=num_layers, **_COMMON)
    elif arch == "glm4":
        cfg = Glm4Config(
            vocab_size=vocab_size,
            num_hidden_layers=num_layers,
            pad_token_id=0,
            eos_token_id=[1],
            **_COMMON,
        )
    elif arch == "gemma4":
        num_layers = max(num_layers, 6)
        layer_types = ["sliding_attention", "sliding_attention", "full_attention"] * (
            num_layers // 3
        )
        layer_types += ["sliding_attention"] * (num_layers - len(layer_types))
        layer_types[-1] = "full_attention"
        cfg = Gemma4TextConfig(
            vocab_size=vocab_size,
            num_hidden_layers=num_layers,
            layer_types=layer_types,
            sliding_window=16,
            num_kv_shared_layers=2,
            hidden_size_per_layer_input=8,
            vocab_size_per_layer_input=vocab_size,
            global_head_dim=32,
            final_logit_softcapping=30.0,
            hidden_activation="gelu_pytorch_tanh",
            pad_token_id=0,
            eos_token_id=1,
            bos_token_id=2,
            **_COMMON,
        )
    else:
        raise ValueError(f"unknown tiny architecture {arch!r}; known: {', '.join(ARCHITECTURES)}")
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


_CLASSES = {
    "llama": LlamaForCausalLM,
    "qwen3": Qwen3ForCausalLM,
    "glm4": Glm4ForCausalLM,
    "gemma4": Gemma4ForCausalLM,
}


def tiny_model(
    arch: str, seed: int = 0, dtype: torch.dtype = torch.float32, **config_kwargs
) -> PreTrainedModel:
    """A tiny `arch` model with seeded random weights, in eval mode.

    Weights are drawn with a larger spread than HF's default init (std 0.02), so that logits are
    far from ties and greedy tokens are a sharp test of exactness.
    """
    cfg = tiny_config(arch, **config_kwargs)
    gen = torch.Generator().manual_seed(seed)
    with torch.device("cpu"):
        model = _CLASSES[arch](cfg)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.ndim >= 2:
                param.copy_(
                    torch.randn(param.shape, generator=gen) * (1.0 / param.shape[-1] ** 0.5)
                )
            elif "norm" in name:
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=gen))
            else:
                param.copy_(0.1 * torch.randn(param.shape, generator=gen))
    return model.to(dtype).eval()
