"""The fused layers never leave their path quietly (engine/fused/layers.py): a kernel the device
cannot launch, and a module whose dtypes the kernels do not take, fall back to HF's forward, and
each lands in the run manifest's fallbacks. Under TRITON_INTERPRET=1 on CPU tensors; the launch
failure is Triton's own exception, raised where Triton raises it (the kernel's launch)."""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 set before triton is imported", allow_module_level=True)
pytest.importorskip("triton")

from helpers.engine_reference import assert_matches_reference, random_ids  # noqa: E402
from helpers.sealed_fallbacks import manifest_fallbacks  # noqa: E402
from triton.runtime.errors import OutOfResources  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

from nudgeability.engine import Engine, SamplingParams  # noqa: E402
from nudgeability.engine.fused import layers  # noqa: E402
from nudgeability.models.testing.tiny import tiny_model  # noqa: E402
from nudgeability.util import fallbacks  # noqa: E402


@pytest.fixture
def clean(monkeypatch):
    fallbacks.reset()
    monkeypatch.setattr(layers, "_failed", False)  # restored after the test, whatever it set
    yield
    fallbacks.reset()


def test_a_kernel_the_device_cannot_launch_falls_back_to_hf_recorded(monkeypatch, clean, tmp_path):
    """`norm_rope`'s launch raises OutOfResources (as `CompiledKernel._init_handles` does when
    a kernel needs more shared memory than the GPU has): the step still runs, on HF's modules
    from that point on, the tokens are HF's, and the manifest names the kernel."""
    launched = []
    run = InterpretedFunction.run

    def launch(self, *args, **kwargs):
        launched.append(self.__name__)
        if self.__name__ == "norm_rope":
            raise OutOfResources(232448, 232448 // 2, "shared memory")
        return run(self, *args, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", launch)
    model = tiny_model("qwen3", num_layers=2)
    layers.fuse(model)
    engine = Engine(model, batch_invariant=False)
    engine.runner.fused, engine.runner._fused_checked = True, True  # as on CUDA, check done
    prompt = random_ids(9, seed=5)
    with pytest.warns(fallbacks.FallbackWarning, match="norm_rope"):
        (done,) = engine.generate([prompt], SamplingParams(max_new_tokens=4), return_logits=True)
    # one norm (the first layer's input norm), then the failed launch, then nothing fused
    assert launched == ["rms_norm", "norm_rope"] and not layers.active()
    assert_matches_reference(model, done, prompt, 4, engine.eos_ids)
    (taken,) = manifest_fallbacks(tmp_path / "run")
    assert taken["path"] == "fused layer kernels (engine/fused): norm_rope"
    assert taken["used"] == layers.EAGER_OPS and "OutOfResources" in taken["reason"]


def test_head_norms_in_another_dtype_take_hfs_attention_recorded(clean, tmp_path):
    """Head norms kept in fp16 beside fp32 activations: the fused head norm cannot keep HF's
    rounding, so the attention takes HF's forward (the other modules stay fused), recorded."""
    model = tiny_model("qwen3", num_layers=2)
    for layer in model.model.layers:
        layer.self_attn.q_norm.half()
        layer.self_attn.k_norm.half()
    ids = torch.tensor([random_ids(5, seed=1)])
    with torch.no_grad():
        want = model(input_ids=ids, use_cache=False).logits
    layers.fuse(model)
    with pytest.warns(fallbacks.FallbackWarning, match="head norms"):
        with torch.no_grad(), layers.fused_forward():
            got = model(input_ids=ids, use_cache=False).logits
    assert layers.active() is False  # outside the context
    scale = want.abs().amax()
    assert ((got - want).abs().max() / scale).item() <= 1e-4
    (taken,) = manifest_fallbacks(tmp_path / "run")
    assert taken["path"] == "fused layer kernels (engine/fused): FusedQwen3Attention"
    assert taken["used"] == "the HF attention forward"
    assert "torch.float16, the activations torch.float32" in taken["reason"]
