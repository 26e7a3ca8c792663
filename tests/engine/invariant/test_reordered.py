"""A model's linears kept only in oneDNN's layout (engine/invariant/cpu/reordered.py): the products are the bits
of a one-thread loop of the library's calls on copies reordered here (what the kept copy of
engine/invariant/cpu/products.py gives), and float64's to float32's rounding; a tiny model of every family
keeps its logits and greedy tokens bit for bit; the dense weights are freed; a tied LM head
stays dense."""

from __future__ import annotations

import copy
import gc
import weakref
from pathlib import Path

import pytest
import torch

from nudgeability.engine.invariant.cpu import weights
from nudgeability.engine.invariant.cpu.cores import CORES
from nudgeability.engine.invariant.cpu.reordered import ReorderedLinear, reorder_linears
from nudgeability.engine.invariant.linears import adopt, invariant_forward, product
from nudgeability.models.testing.tiny import ARCHITECTURES, tiny_model
from nudgeability.models.testing.tiny_tokenizers import tiny_tokenizer

pytestmark = pytest.mark.skipif(not weights.ONEDNN, reason="torch built without oneDNN")


def _library_loop(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Every 16-row tile (zero-padded) times every column slice of `weight` (reordered here by
    torch's op), one call each, on one thread."""
    m, k = x.shape
    rows = weights.TILE_ROWS
    padded = -(-m // rows) * rows
    xp = torch.cat([x, x.new_zeros(padded - m, k)])
    out = torch.empty(padded, weight.shape[0])
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for s0, s1 in weights.column_slices(weight.shape[0]):
            part = torch.ops.mkldnn._reorder_linear_weight(weight[s0:s1].clone(), rows)
            for t in range(0, padded, rows):
                tile = xp[t : t + rows]
                out[t : t + rows, s0:s1] = torch.ops.mkldnn._linear_pointwise(
                    tile, part, None, "none", [], ""
                )
    finally:
        torch.set_num_threads(before)
    return out[:m]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("n", [64, 1536, 4096 + 300])
@pytest.mark.parametrize("m", [1, 17, 97])
def test_a_reordered_linear_gives_the_bits_of_the_library_loop_at_every_core_count(
    m, n, bias, cores
):
    torch.manual_seed(m * 3 + n)
    k = 160
    dense = torch.nn.Linear(k, n, bias=bias)
    x = torch.randn(2, m, k)  # a leading batch dimension, as a decoder gives
    with torch.no_grad():
        weight = dense.weight.detach().clone()
        b = dense.bias.detach().clone() if bias else None
        expected = _library_loop(x.reshape(-1, k), weight)
        if bias:
            expected = expected + b
        expected = expected.view(2, m, n)
        for count in (1, 2, 3):
            # the products' cores are torch's threads (`invariant_forward`); the layer is made
            # at that thread count too (its reorder must not depend on it)
            torch.set_num_threads(count)
            layer = ReorderedLinear(dense)
            assert torch.equal(layer(x), expected), count  # outside the engine's products
            with invariant_forward():
                assert CORES.count == count
                assert torch.equal(layer(x), expected), count
                if weights.reorderable(dense.weight):  # the kept copy: the same calls
                    got = product(x, dense.weight, dense.bias)
                    assert torch.equal(got, expected), count
    exact = x.double() @ weight.double().t() + (0 if b is None else b.double())
    torch.testing.assert_close(expected, exact.float(), rtol=1e-5, atol=1e-4)


def test_a_reordered_linear_refuses_what_it_cannot_compute():
    layer = ReorderedLinear(torch.nn.Linear(8, 4))
    with pytest.raises(TypeError, match="engine/invariant/cpu/reordered.py"):
        layer(torch.randn(2, 8, dtype=torch.float64))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_family_keeps_its_logits_and_greedy_tokens_and_frees_the_dense_weights(arch):
    model = tiny_model(arch, seed=5)
    converted = copy.deepcopy(model)
    table = converted.get_input_embeddings().weight
    freed = [
        weakref.ref(m.weight)
        for m in converted.modules()
        if type(m) is torch.nn.Linear and m.weight is not table
    ]
    replaced = reorder_linears(converted)
    assert replaced == len(freed) > 0
    gc.collect()
    assert all(ref() is None for ref in freed)  # nothing else held a dense weight
    remaining = [m for m in converted.modules() if type(m) is torch.nn.Linear]
    head = converted.get_output_embeddings()
    assert remaining == ([head] if getattr(head, "weight", None) is table else [])  # tied: dense
    ids = torch.tensor([[5, 17, 33, 2, 90, 41, 7, 200, 11]])
    adopt(model), adopt(converted)  # the tied dense head, the one linear left, too
    with torch.no_grad(), invariant_forward():
        expected = model(ids).logits
        assert torch.equal(converted(ids).logits, expected)
        kwargs = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
        tokens = model.generate(ids, **kwargs)
        assert torch.equal(converted.generate(ids, **kwargs), tokens)
    with torch.no_grad():
        dense = model.float()(ids).logits  # the library's own F.linear
    torch.testing.assert_close(expected, dense, rtol=1e-4, atol=1e-4)


def test_a_model_not_wholly_fp32_on_the_cpu_or_quantised_is_left_as_it_is():
    model = tiny_model("llama", dtype=torch.bfloat16)
    assert reorder_linears(model) == 0
    assert any(type(m) is torch.nn.Linear for m in model.modules())
    quantised = tiny_model("llama")  # a packed integer weight beside fp32 linears (models/quant/)
    quantised.model.layers[0].mlp.register_buffer("packed", torch.zeros(4, 8, dtype=torch.int32))
    assert reorder_linears(quantised) == 0


def test_a_run_s_load_lets_go_of_the_checkpoint_file(tmp_path):
    """The safetensors file stays mapped while any tensor loaded from it lives (module
    docstring): after `reorder_linears` no mapping of it is left (Linux's /proc/self/maps)."""
    from nudgeability.models.loader import load_model

    maps = Path("/proc/self/maps")
    if not maps.exists():
        pytest.skip("no /proc/self/maps on this system")
    tiny_model("qwen3", seed=2).save_pretrained(tmp_path, safe_serialization=True)
    tiny_tokenizer("qwen3").save_pretrained(tmp_path)
    files = sorted(str(f.resolve()) for f in tmp_path.glob("*.safetensors"))
    loaded = load_model(tmp_path)
    mapped = [f for f in files if f in maps.read_text()]
    assert reorder_linears(loaded.model) > 0
    gc.collect()
    assert mapped == files  # the load maps the file, else this test shows nothing
    assert not [f for f in files if f in maps.read_text()]


def test_a_weight_wider_than_the_rule_reorders_stays_dense_in_every_path():
    """The LM head's width: never reordered, neither as a kept copy nor by `reorder_linears`, so
    its calls are the same whoever holds the model (weights.REORDER_MAX_COLUMNS)."""
    wide = weights.REORDER_MAX_COLUMNS + 16
    model = torch.nn.Sequential(torch.nn.Linear(32, wide), torch.nn.Linear(wide, 8))
    assert reorder_linears(model) == 1
    assert type(model[0]) is torch.nn.Linear and type(model[1]) is ReorderedLinear
    parts = weights.packed_slices(model[0].weight)
    assert all(
        not p.is_mkldnn and p.data_ptr() == model[0].weight[s0:].data_ptr()
        for p, (s0, _) in zip(parts, weights.column_slices(wide))
    )
