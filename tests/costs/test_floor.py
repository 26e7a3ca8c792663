"""The bandwidth floor of a decode step (costs/floor.py): the bytes it reads, counted by
hand for tiny configs written out here, and the one floor both GPU benchmark scripts use."""

from __future__ import annotations

import pytest
import torch

from nudgeability.costs.floor import (
    floor_seconds,
    kv_read_bytes,
    kv_slot_bytes,
    step_bytes,
    weight_read_bytes,
)
from nudgeability.models.testing.tiny import tiny_model

# tiny_config's shape: hidden 64, MLP 128, 4 query heads and 2 KV heads of 16, vocabulary 320
H, MLP, Q, KV, D, V = 64, 128, 4, 2, 16, 320


def _layer(qk_norm: bool) -> int:
    attn = H * Q * D + 2 * H * KV * D + Q * D * H  # q, k, v, o (no biases)
    mlp = 3 * H * MLP  # gate, up, down
    norms = 2 * H + (2 * D if qk_norm else 0)  # input and post-attention norms (+ q/k norms)
    return attn + mlp + norms


ROPE_BUFFERS = 2 * (D // 2)  # inv_freq and original_inv_freq, fp32


def test_untied_model_reads_every_weight_but_the_input_embedding():
    model = tiny_model("qwen3", num_layers=4)
    assert not model.config.tie_word_embeddings
    # 4 layers, the final norm, the LM head [V, H]; not the embedding table [V, H]
    want = 4 * (4 * _layer(True) + H + V * H + ROPE_BUFFERS)
    assert weight_read_bytes(model) == want
    everything = sum(p.numel() * p.element_size() for p in model.parameters())
    assert everything - weight_read_bytes(model) == 4 * V * H - 4 * ROPE_BUFFERS


def test_linears_kept_in_onednn_layout_still_count_their_weights():
    """A run's CPU model holds its linears only in oneDNN's layout (engine/invariant/cpu/
    reordered.py): no parameter holds them, and the floor still counts their bytes."""
    from nudgeability.engine.invariant.cpu.reordered import reorder_linears

    model = tiny_model("qwen3", num_layers=4)
    before = weight_read_bytes(model)
    if not reorder_linears(model):
        pytest.skip("this torch build has no oneDNN matmul")
    assert weight_read_bytes(model) == before


def test_tied_model_reads_the_shared_table_once_as_its_lm_head():
    model = tiny_model("llama", num_layers=4, tie_word_embeddings=True)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    want = 4 * (4 * _layer(False) + H + V * H + ROPE_BUFFERS)
    assert weight_read_bytes(model) == want


def test_bf16_weights_count_two_bytes():
    model = tiny_model("qwen3", num_layers=4, dtype=torch.bfloat16)
    # `.to(bfloat16)` casts the rotary buffers too
    assert weight_read_bytes(model) == 2 * (4 * _layer(True) + H + V * H + ROPE_BUFFERS)


def test_kv_read_per_slot_and_per_layer():
    model = tiny_model("qwen3", num_layers=4)
    per_slot = 4 * 2 * KV * D  # 4 layers, K and V, 2 heads of 16
    assert kv_slot_bytes(model, 2) == 2 * per_slot
    assert kv_read_bytes(model, 2, slots=100, rows=3) == 2 * per_slot * 100
    assert step_bytes(model, 100, 3, 2).total == weight_read_bytes(model) + 2 * per_slot * 100


def test_gemma4_sliding_layers_read_a_window_per_row_and_shared_layers_read_again():
    model = tiny_model("gemma4", num_layers=6)
    # layers: sliding, sliding, full, sliding, sliding, full; the last two reuse earlier KV.
    # sliding: 2 KV heads of 16; full: 2 KV heads of global_head_dim 32; window 16
    sliding, full = 2 * KV * D, 2 * KV * 32
    assert kv_slot_bytes(model, 4) == 4 * (3 * sliding + full)  # layers 0-3 store
    rows, slots = 2, 100
    want = 4 * (4 * sliding * min(slots, rows * 16) + 2 * full * slots)
    assert kv_read_bytes(model, 4, slots=slots, rows=rows) == want


def test_floor_is_the_read_bytes_at_the_copy_traffic_rate():
    # a copy of N bytes in t seconds moves 2N bytes: a step that reads N bytes takes t / 2
    n, t = 2**30, 0.001
    assert floor_seconds(n, 2 * n / t) == pytest.approx(t / 2)


def test_both_gpu_scripts_use_the_one_floor():
    """The GPU check's engine and quant sections' floors for the same model and KV agree with the
    hand count."""
    from benchkit.gpu import engine_speed as gpu_engine
    from benchkit.gpu import quant as gpu_quant

    model = tiny_model("qwen3", num_layers=4, dtype=torch.bfloat16)
    bandwidth = 1e12
    weights = 2 * (4 * _layer(True) + H + V * H + ROPE_BUFFERS)
    kv = 2 * 4 * 2 * KV * D * 300  # bf16 KV, 300 slots
    want = (weights + kv) / bandwidth
    assert gpu_engine.step_floor_s(model, 300, 12, bandwidth) == pytest.approx(want)
    assert gpu_quant.step_floor_s(model, 300, 12, bandwidth) == pytest.approx(want)
