"""Tiny models whose modules `engine/fused/layers.py` adopted, run under TRITON_INTERPRET=1 on CPU
tensors: inside `fused_forward()` they equal the HF forward to rounding, outside it bit for bit.

The tolerance is the engine's own bound against HF (engine/README.md, *The guarantee*): logits
within 1e-4 of the largest logit. Each fused op differs from HF's eager ops only in the rounding
of its fp32 sums and exponentials (a few ulps, tests/engine/fused/test_triton_ops.py), which two
small layers carry to the logits as ~1e-6 relative. In fp16 the bound is fp16's own: the fused
model must be no farther from HF's fp16 forward than that forward is from the same weights in
fp32, since a kernel rounds differently from HF only where an fp32 sum lands next to an fp16
rounding boundary, one fp16 step on an element, which is what fp16 rounding does everywhere.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch

# tests/conftest.py sets TRITON_INTERPRET=1 before triton is first imported (it is read then)
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 set before triton is imported", allow_module_level=True)
pytest.importorskip("triton")

from helpers.engine_reference import assert_matches_reference, random_ids  # noqa: E402

from nudgeability.engine import Engine, SamplingParams  # noqa: E402
from nudgeability.engine.fused import layers  # noqa: E402
from nudgeability.engine.fused import triton_ops as ops  # noqa: E402
from nudgeability.engine.model_runner import ModelRunner  # noqa: E402
from nudgeability.models.testing.tiny import tiny_model  # noqa: E402
from nudgeability.util import fallbacks  # noqa: E402

# what each family's tiny model has swapped: (norms, MLPs, attentions, decoder layers) per
# layer plus the final norm; Gemma 4's attention and layer stay HF's (layers.py)
LAYERS = 2  # the interpreter runs each program in Python: few layers, few tokens
SWAPPED = {
    "qwen3": LAYERS * (4 + 1 + 1 + 1) + 1,  # input, post-attention, q and k norms
    "glm4": LAYERS * (4 + 1 + 1 + 1) + 1,  # input, post-attention, post-self-attn, post-mlp
    "llama": LAYERS * (2 + 1 + 1 + 1) + 1,
    # its 6 layers: 5 norms each (4 around attention and MLP, the per-layer input's) and the q
    # norm, k and v norms where KV is not shared (4 layers), the MLP; the final norm and the
    # per-layer projection's
    "gemma4": 6 * (5 + 1 + 1) + 4 * 2 + 2,
}


# the kernel calls of one forward: (rms_norm, norm_rope, act_mul); the layers' norms with the
# residual's add in one of them (GLM-4's two extra per layer), q and k, the MLPs, the final norm
LAUNCHES = {
    "qwen3": (2 * LAYERS + 1, 2 * LAYERS, LAYERS),
    "glm4": (4 * LAYERS + 1, 2 * LAYERS, LAYERS),
    "llama": (2 * LAYERS + 1, 2 * LAYERS, LAYERS),
    "gemma4": (46, 0, 6),  # every norm module once (SWAPPED less the 6 MLPs)
}


@pytest.fixture
def launches(count_calls):
    """Counts of each wrapper's calls, so that a test sees the fused path taken."""
    return count_calls(ops, ("rms_norm", "norm_rope", "act_mul"))


def _pair(arch: str, dtype: torch.dtype = torch.float32):
    reference = tiny_model(arch, num_layers=LAYERS, dtype=dtype)
    adopted = copy.deepcopy(reference)
    return reference, adopted, layers.fuse(adopted)


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits.double()


def _assert_close(got: torch.Tensor, want: torch.Tensor, rtol: float) -> None:
    scale = want.abs().amax(dim=-1, keepdim=True)
    rel = ((got - want).abs() / scale).max().item()
    assert rel <= rtol, f"logits differ by {rel:.2e} of the largest"


@pytest.mark.parametrize("arch", ["qwen3", "glm4", "llama", "gemma4"])
def test_an_adopted_model_equals_hf_inside_the_context_and_bitwise_outside(arch, launches):
    reference, adopted, changed = _pair(arch)
    assert changed == SWAPPED[arch]
    assert layers.fuse(adopted) == 0  # a second adoption changes nothing
    ids = torch.tensor([random_ids(5, seed=1), random_ids(5, seed=2)])
    want = _logits(reference, ids)
    assert torch.equal(_logits(adopted, ids), want)  # outside the context: HF's own ops
    assert not any(launches.values())
    with layers.fused_forward():
        _assert_close(_logits(adopted, ids), want, 1e-4)
    assert tuple(launches.values()) == LAUNCHES[arch]


@pytest.mark.parametrize("arch", ["qwen3", "glm4"])
def test_an_adopted_fp16_model_equals_hf_to_fp16_rounding(arch):
    reference, adopted, _ = _pair(arch, torch.float16)
    ids = torch.tensor([random_ids(6, seed=3)])
    want = _logits(reference, ids)
    in_fp32 = _logits(copy.deepcopy(reference).float(), ids)
    scale = want.abs().amax(dim=-1, keepdim=True)
    fp16_rounding = ((in_fp32 - want).abs() / scale).max().item()  # ~2e-3 on these models
    with layers.fused_forward():
        _assert_close(_logits(adopted, ids), want, fp16_rounding)


def test_the_fused_attention_writes_hfs_cache_as_hf_generate_reads_it():
    reference, adopted, _ = _pair("qwen3")
    ids = torch.tensor([random_ids(5, seed=4)])
    kwargs = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
    want = reference.generate(ids, **kwargs)
    with layers.fused_forward():
        assert torch.equal(adopted.generate(ids, **kwargs), want)


@pytest.mark.parametrize("arch", ["qwen3", "glm4", "llama"])
def test_the_engine_on_an_adopted_model_matches_hf_greedy(arch):
    """Through the engine's own cache and attention (engine/kv/kv_cache.py, engine/attention/): the fused
    attention hands `PoolCache.update` its keys as HF's forward does. Rows unpadded
    (`batch_invariant=False`, as on CUDA) to keep the interpreted launches few."""
    model = tiny_model(arch, num_layers=LAYERS)
    layers.fuse(model)
    engine = Engine(model, batch_invariant=False)
    prompt = random_ids(9, seed=5)
    with layers.fused_forward():
        (done,) = engine.generate([prompt], SamplingParams(max_new_tokens=5), return_logits=True)
    # the reference is HF generate on the same model outside the context: its eager modules
    assert_matches_reference(model, done, prompt, 5, engine.eos_ids)


def test_a_cpu_model_runner_adopts_nothing():
    """On CPU the records are the invariant construction's: no module is swapped."""
    model = tiny_model("qwen3", num_layers=2)
    runner = ModelRunner(model)
    assert runner.fused is False
    assert not any(isinstance(m, layers._Fused) for m in model.modules())


def test_without_triton_the_model_keeps_its_modules_and_the_fallback_is_recorded(monkeypatch):
    fallbacks.reset()
    monkeypatch.setattr(ops, "available", lambda: False)
    model = tiny_model("qwen3", num_layers=2)
    with pytest.warns(fallbacks.FallbackWarning, match="triton is not importable"):
        assert layers.adopt(model) is False
    assert not any(isinstance(m, layers._Fused) for m in model.modules())
    assert [f.path for f in fallbacks.taken()] == [layers.FALLBACK_PATH]
    fallbacks.reset()


def test_an_mlp_with_another_activation_stays_eager():
    model = tiny_model("qwen3", num_layers=2, hidden_act="relu")
    layers.fuse(model)
    assert not any(
        isinstance(m, layers._Fused) for m in (layer.mlp for layer in model.model.layers)
    )


def _engine_with_fused_forced(model):
    """An engine whose runner takes the fused path as it would on CUDA (the kernels run under
    the interpreter here), its first forward not yet checked; rows unpadded, as on CUDA."""
    layers.fuse(model)
    engine = Engine(model, batch_invariant=False)
    engine.runner.fused, engine.runner._fused_checked = True, False
    return engine


def test_the_first_fused_forward_is_checked_and_a_bad_kernel_falls_back(monkeypatch):
    """ModelRunner checks its first fused forward against the library's forward of the same
    tokens (engine/model_runner.py): kernels that agree stay on; a kernel that computes wrong
    is left for the library's modules, loudly, and the tokens are still HF's."""
    fallbacks.reset()
    prompt = random_ids(9, seed=3)
    model = tiny_model("qwen3", num_layers=LAYERS)
    engine = _engine_with_fused_forced(model)
    (done,) = engine.generate([prompt], SamplingParams(max_new_tokens=3), return_logits=True)
    assert engine.runner.fused is True and not fallbacks.taken()
    assert_matches_reference(model, done, prompt, 3, engine.eos_ids)

    broken = ops.act_mul
    monkeypatch.setattr(ops, "act_mul", lambda *a, **k: broken(*a, **k) * 3.0)
    model = tiny_model("qwen3", num_layers=LAYERS)
    engine = _engine_with_fused_forced(model)
    with pytest.warns(fallbacks.FallbackWarning, match="fused layer kernels"):
        (done,) = engine.generate([prompt], SamplingParams(max_new_tokens=3), return_logits=True)
    assert engine.runner.fused is False
    assert [f.path for f in fallbacks.taken()] == ["fused layer kernels (engine/fused/)"]
    monkeypatch.setattr(ops, "act_mul", broken)
    assert_matches_reference(model, done, prompt, 3, engine.eos_ids)
    fallbacks.reset()
