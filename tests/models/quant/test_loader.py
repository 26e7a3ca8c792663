"""The loader: shards, skip lists, dtype, no full-precision weights, and `load_model` dispatch."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nudgeability.models.quant import load_quantized, write_bnb4, write_fp8, write_w4a16
from nudgeability.models.testing.tiny import tiny_model

QUANT_STORAGE = {
    "FP8BlockLinear": torch.float8_e4m3fn,
    "PackQuantizedLinear": torch.int32,
    "BnB4Linear": torch.uint8,
}


@pytest.mark.parametrize("fmt", ["fp8_b32_f16", "w4a16_g32_asym", "bnb_nf4_dq"])
def test_a_sharded_checkpoint_loads_the_same_tensors_as_one_file(checkpoint, qt, tmp_path, fmt):
    case = checkpoint("gemma4", fmt)
    qt.FORMATS[fmt].write(case.model, tmp_path, max_shard_bytes=40_000, **qt.FORMATS[fmt].kwargs)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert (
        len(set(index["weight_map"].values())) > 3 and not (tmp_path / "model.safetensors").exists()
    )
    one, sharded = qt.load(case).state_dict(), load_quantized(tmp_path).state_dict()
    assert one.keys() == sharded.keys()
    for key in one:
        assert torch.equal(one[key], sharded[key]), key


@pytest.mark.parametrize(
    "write,kwargs",
    [
        (
            write_fp8,
            dict(block_size=(32, 32), modules_to_not_convert=("down_proj", "model.layers.1")),
        ),
        (write_bnb4, dict(skip_modules=("down_proj", "model.layers.1"))),
        (
            write_w4a16,
            dict(
                group_size=32, ignore=("lm_head", "re:.*down_proj$", "re:model[.]layers[.]1[.].*")
            ),
        ),
    ],
)
def test_skip_lists_keep_the_named_layers_unquantised(qt, tmp_path, write, kwargs):
    model = tiny_model("qwen3")
    write(model, tmp_path, **kwargs)
    loaded = load_quantized(tmp_path)
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        got = loaded.get_submodule(name)
        if name.endswith("down_proj") or name.startswith("model.layers.1.") or name == "lm_head":
            assert type(got) is torch.nn.Linear and torch.equal(got.weight, module.weight), name
        else:
            assert isinstance(got, qt.QUANT_CLASSES), name


@pytest.mark.parametrize("fmt", ["fp8_b32_f16", "w4a16_g32_asym", "bnb_nf4_dq"])
def test_loading_in_bfloat16_keeps_quantised_storage_and_rounds_weights_once(checkpoint, qt, fmt):
    case = checkpoint("glm4", fmt)
    model = load_quantized(case.directory, dtype=torch.bfloat16)
    reference = qt.reference_weights(case.directory)
    for name, param in model.named_parameters():
        assert param.dtype == torch.bfloat16, name
    for name, module in qt.quantised_modules(model).items():
        assert torch.equal(module.dequantize(torch.bfloat16), reference[name].to(torch.bfloat16)), (
            name
        )
    ids = torch.randint(3, 300, (1, 30), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        logits = model(ids).logits
        want = qt.reference_model(case.model, reference)(ids).logits
    assert logits.dtype == torch.bfloat16 and qt.rel_diff(logits, want) < 0.05  # bf16 activations


class _Recorder(TorchDispatchMode):
    """Every tensor with storage (not on the meta device) that a torch op computes, as (dtype, shape).

    `aten.empty` is left out: accelerate's `init_empty_weights` lets `nn.Linear` allocate its
    weight with `torch.empty` and moves it to meta at once — uninitialised memory that is never
    written (no resident pages; test_memory measures that).
    """

    def __init__(self):
        super().__init__()
        self.created: list[tuple[torch.dtype, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.empty.memory_format:
            return out
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and not t.is_meta:
                self.created.append((t.dtype, tuple(t.shape)))
        return out


@pytest.mark.parametrize("fmt", ["fp8_b32_f16", "w4a16_g32_asym", "bnb_nf4_dq"])
@pytest.mark.parametrize("arch", ["qwen3", "gemma4"])
def test_loading_never_creates_a_full_precision_copy_of_a_quantised_weight(
    checkpoint, qt, fmt, arch
):
    case = checkpoint(arch, fmt)
    with _Recorder() as recorder:
        model = qt.load(case)
    modules = qt.quantised_modules(model)
    weight_shapes = {(m.out_features, m.in_features) for m in modules.values()}
    float_outputs = [
        shape
        for dtype, shape in recorder.created
        if dtype.is_floating_point and dtype.itemsize >= 2
    ]
    assert not [s for s in float_outputs if s in weight_shapes]
    for (
        name,
        module,
    ) in modules.items():  # the layers hold their quantised storage, and nothing larger
        storage = module.weight_packed if hasattr(module, "weight_packed") else module.weight
        assert storage.dtype == QUANT_STORAGE[type(module).__name__], name
        full_bytes = module.out_features * module.in_features * 4
        held = sum(b.numel() * b.element_size() for b in module.buffers())
        # fp32 would be 4 bytes per weight; these hold <= 2, plus bitsandbytes' fixed code tables (272 floats)
        assert held <= full_bytes * 0.5 + 272 * 4 + 16, name


def test_load_model_returns_a_quantised_model_with_its_tokenizer(
    checkpoint, qt, tmp_path, tiny_tokenizer
):
    import shutil

    from nudgeability.models.loader import load_model

    case = checkpoint("qwen3", "bnb_nf4_dq")
    shutil.copytree(case.directory, tmp_path / "ckpt")
    tiny_tokenizer.save_pretrained(tmp_path / "ckpt")
    loaded = load_model(tmp_path / "ckpt")
    assert loaded.source.quant_method == "bitsandbytes" and loaded.tokenizer.eos_token == "<eos>"
    assert qt.quantised_modules(loaded.model) and not loaded.model.training
