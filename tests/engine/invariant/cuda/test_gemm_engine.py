"""The batch-invariant Triton GEMMs inside the engine, with the CUDA branch forced onto CPU
tensors (`Engine(invariance="triton")`, under Triton's interpreter): every product of a tiny
2-layer model takes them, the greedy tokens and logits are HF's, a prompt's logits are bitwise
its run alone when others run beside it (the CPU attention is already invariant on CPU tensors,
so the products are what this checks), and they compose with the fused layer kernels. A
quantised layer takes its Triton kernel inside the context and its own path outside it."""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 set before triton is imported", allow_module_level=True)
pytest.importorskip("triton")

from helpers.engine_reference import assert_matches_reference, random_ids  # noqa: E402

from nudgeability.engine import Engine, SamplingParams  # noqa: E402
from nudgeability.engine.fused import layers as fused_layers  # noqa: E402
from nudgeability.engine.invariant import linears  # noqa: E402
from nudgeability.engine.invariant.cpu import products as cpu_products  # noqa: E402
from nudgeability.engine.invariant.cuda import products  # noqa: E402
from nudgeability.models.quant import triton_kernels  # noqa: E402
from nudgeability.models.testing.tiny import tiny_model  # noqa: E402


@pytest.fixture
def calls(monkeypatch):
    """Which products ran: the Triton dense kernel's calls (with the contexts open at each) and
    the CPU construction's; both still compute (spies, not stand-ins)."""
    seen = {"triton": [], "cpu": 0}
    dense, cpu_linear = triton_kernels.dense_matmul, cpu_products.linear

    def triton(x, weight, tile=None):
        seen["triton"].append((linears.active(), fused_layers.active()))
        return dense(x, weight, tile)

    def cpu(*args):
        seen["cpu"] += 1
        return cpu_linear(*args)

    monkeypatch.setattr(triton_kernels, "dense_matmul", triton)
    monkeypatch.setattr(cpu_products, "linear", cpu)
    return seen


def test_a_prompt_is_bitwise_its_run_alone_and_hfs(calls):
    model = tiny_model("qwen3", num_layers=2)
    engine = Engine(model, invariance="triton")
    prompt = random_ids(9, seed=1)
    params = SamplingParams(max_new_tokens=4)
    (alone,) = engine.generate([prompt], params, return_logits=True)
    assert_matches_reference(model, alone, prompt, 4, engine.eos_ids)
    others = [random_ids(n, seed=n) for n in (5, 13, 20)]
    among = engine.generate(others[:2] + [prompt] + others[2:], params, return_logits=True)[2]
    assert among.token_ids == alone.token_ids
    assert torch.equal(among.logits, alone.logits)
    # 7 linears a layer and the LM head, all of them Triton, inside the invariant context
    assert calls["triton"] and calls["cpu"] == 0
    assert all(invariant for invariant, _ in calls["triton"])


def test_the_default_cpu_run_keeps_the_cpu_construction(calls):
    model = tiny_model("qwen3", num_layers=2)
    engine = Engine(model)
    assert engine.runner.invariance == "cpu"
    engine.generate([random_ids(5, seed=2)], SamplingParams(max_new_tokens=2))
    assert calls["cpu"] and not calls["triton"]


def test_with_the_fused_layers_both_contexts_are_open(calls):
    model = tiny_model("qwen3", num_layers=2)
    fused_layers.fuse(model)
    engine = Engine(model, invariance="triton")
    engine.runner.fused, engine.runner._fused_checked = True, True  # as on CUDA, check done
    prompt = random_ids(5, seed=3)
    (done,) = engine.generate([prompt], SamplingParams(max_new_tokens=1), return_logits=True)
    assert_matches_reference(model, done, prompt, 1, engine.eos_ids)
    assert calls["triton"] and all(both == (True, True) for both in calls["triton"])


def test_a_quantised_layer_takes_its_triton_kernel_inside_the_context_only():
    """Whatever fused kernel the layer was given at load (here: its exact product under another
    name, which the test can predict) runs outside the context; inside, its Triton kernel."""
    from helpers.quant_layers import fp8_layer

    from nudgeability.models.quant.compute import FusedPath

    layer, _ = fp8_layer(80, 256)
    layer.fused = FusedPath("loaded", lambda x: layer.exact_no_bias(x))
    assert linears.adopt(torch.nn.Sequential(layer), triton=True) == 1
    # chosen at adoption, before any forward (none may make its tensors inside a graph capture)
    assert layer.invariant_kernel.startswith("triton_fp8[64x")
    assert products.kernels(torch.nn.Sequential(layer)) == {"fp8": {layer.invariant_kernel: 1}}
    x = torch.randn(5, 256)
    outside = layer(x)
    with linears.invariant_forward(triton=True):
        inside = layer(x)
    assert torch.equal(inside, products.quantised(layer, x))
    assert torch.equal(outside, torch.nn.functional.linear(x, layer.dequantize()))
    assert not torch.equal(inside, outside)  # two kernels, two orders of summation


def test_a_4bit_layers_exact_path_leaves_bitsandbytes_matmul_on_the_triton_branch():
    """bitsandbytes' `matmul_4bit` picks its kernel by the rows: on the Triton branch the exact
    path is the dequantised weight through the invariant dense product; the CPU construction's
    adoption leaves the layer as it was."""
    pytest.importorskip("bitsandbytes")
    from helpers.quant_layers import bnb4_layer

    layer, _ = bnb4_layer(80, 256)
    linears.adopt(torch.nn.Sequential(layer))
    assert layer.library_matmul and layer.fused is None  # the exact path
    linears.adopt(torch.nn.Sequential(layer), triton=True)
    assert not layer.library_matmul
    x = torch.randn(3, 256)
    with linears.invariant_forward(triton=True):
        inside = layer(x)
    assert torch.equal(inside, products.linear(x, layer.dequantize(x.dtype)))


def _fp8_model():
    """The tiny model with every linear but the LM head an FP8 layer of its weight (32 x 32
    blocks), whose load-time path is the exact one (what HF's forward outside the context runs)."""
    from nudgeability.models.quant.compute import FusedPath
    from nudgeability.models.quant.fp8_linear import FP8BlockLinear, quantize_fp8_block

    model = tiny_model("qwen3", num_layers=2)
    for name, module in list(model.named_modules()):
        if isinstance(module, torch.nn.Linear) and not name.endswith("lm_head"):
            codes, scale_inv = quantize_fp8_block(module.weight.detach(), (32, 32), torch.float32)
            layer = FP8BlockLinear(codes, scale_inv, (32, 32))
            layer.fused = FusedPath("loaded", layer.exact_no_bias)
            model.set_submodule(name, layer)
    return model


def test_a_quantised_models_prompt_is_bitwise_its_run_alone_and_hfs():
    model = _fp8_model()
    engine = Engine(model, invariance="triton")
    assert products.kernels(model) == {"fp8": {"triton_fp8[64x64x64]": 14}}
    prompt = random_ids(6, seed=4)
    params = SamplingParams(max_new_tokens=3)
    (alone,) = engine.generate([prompt], params, return_logits=True)
    assert_matches_reference(model, alone, prompt, 3, engine.eos_ids)
    among = engine.generate([random_ids(11, seed=5), prompt], params, return_logits=True)[1]
    assert torch.equal(among.logits, alone.logits)
