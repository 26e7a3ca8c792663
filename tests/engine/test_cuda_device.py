"""An engine whose model is on cuda:N works with cuda:N as the current device
(engine/model_runner.py `on_device`, entered by `Engine.step` and `Engine.capture`): torch makes
its streams, events and CUDA graphs, and Triton launches its kernels, on the current device, so
an engine on cuda:1 that left device 0 current would put them on the wrong GPU.

Checked on CPU without stand-ins: the context the runner gives is torch's own device context for
that index (entering one needs CUDA, which this machine lacks; benchmarks/gpu_check.py runs the
engine on a GPU), and off CUDA it changes nothing and the engine runs as before."""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

import torch
from helpers.engine_reference import assert_matches_reference, random_ids

from nudgeability.engine import Engine, SamplingParams
from nudgeability.engine.model_runner import ModelRunner
from nudgeability.models.testing.tiny import tiny_model


def test_a_runner_on_cuda_1_makes_cuda_1_current_for_the_engines_work():
    for index in (0, 1, 3):
        context = ModelRunner.on_device(SimpleNamespace(device=torch.device(f"cuda:{index}")))
        assert type(context) is torch.cuda.device and context.idx == index


def test_a_cpu_engine_steps_with_no_device_switch():
    model = tiny_model("llama", num_layers=1, seed=2)
    engine = Engine(model)
    assert type(engine.runner.on_device()) is nullcontext
    prompt = random_ids(12, seed=4)
    (done,) = engine.generate([prompt], SamplingParams(max_new_tokens=3), return_logits=True)
    assert_matches_reference(model, done, prompt, 3, engine.eos_ids)
