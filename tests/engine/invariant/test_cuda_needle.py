"""The CUDA needle (engine/invariant/cuda_needle.py): the batches it builds really put the
needle in steps of 16, 17, 32, 33, 64 and 65 rows and beside a split prefill (counted from the
engine's own trace, on a CPU engine); its key changes with each thing that can change a GPU's
bits (the device's properties and the libraries mocked) and with nothing else; its answer is
kept on disk and read back."""

from __future__ import annotations

import importlib.metadata
import json
from types import SimpleNamespace

import pytest
import torch

from nudgeability.engine import Engine
from nudgeability.engine.invariant import cuda_needle
from nudgeability.engine.invariant.cuda_needle import (
    CROSSINGS,
    NEEDLE_ROWS,
    NEEDLE_SLOTS,
    cached_cuda_check,
    check_engine,
    cuda_key,
    split_length,
)
from nudgeability.engine.invariant.needle import InvarianceCheck
from nudgeability.models.testing.tiny import tiny_model

H100 = SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0, multi_processor_count=132)


@pytest.fixture
def precision():
    """torch's float32 precision settings, restored after the test as they were."""
    backends = (torch.backends, torch.backends.cuda.matmul, torch.backends.cudnn)
    kept = [getattr(b, "fp32_precision", None) for b in backends]
    legacy = torch.get_float32_matmul_precision()
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    # set and restored here, not with monkeypatch: cuBLASModule's flags live behind
    # __getattr__/__setattr__, which monkeypatch's undo can take for a missing attribute
    flags = {
        n: getattr(matmul, n) for n in ("allow_tf32", "allow_bf16_reduced_precision_reduction")
    }
    cudnn_tf32 = cudnn.allow_tf32
    yield
    for name, value in flags.items():
        setattr(matmul, name, value)
    cudnn.allow_tf32 = cudnn_tf32
    torch.set_float32_matmul_precision(legacy)
    for backend, value in zip(backends, kept):
        if value is not None:
            backend.fp32_precision = value


@pytest.fixture
def gpu(monkeypatch, tmp_path, precision):
    """A stand-in for the device and its software: properties, CUDA version, driver file and
    installed NVIDIA wheels, each settable; the needle cache in tmp_path."""
    monkeypatch.setenv("NUDGE_CACHE", str(tmp_path / "cache"))
    state = SimpleNamespace(props=H100, wheels={"nvidia-cublas-cu12": "12.4.5.8"})
    state.wheels["triton"] = "3.1.0"
    driver = tmp_path / "driver"
    driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\nGCC\n")
    monkeypatch.setattr(cuda_needle, "DRIVER_VERSION", driver)
    maps = tmp_path / "maps"  # a container's cuBLAS: no wheel, the file mapped in the process
    maps.write_text(
        "7f00-7f10 r-xp 00000000 08:01 42 /usr/local/cuda/lib64/libcublasLt.so.12.4.5.8\n"
    )
    monkeypatch.setattr(cuda_needle, "MAPS", str(maps))
    state.maps = maps
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: state.props)
    monkeypatch.setattr(torch.version, "cuda", "12.4")

    def distributions():
        return [SimpleNamespace(metadata={"Name": k}, version=v) for k, v in state.wheels.items()]

    monkeypatch.setattr(importlib.metadata, "distributions", distributions)
    state.driver = driver
    return state


def test_the_needle_s_steps_cross_the_buckets_and_split_a_prefill():
    engine = Engine(
        tiny_model("qwen3", num_layers=2, seed=3),
        trace=True,
        max_batch_tokens=NEEDLE_SLOTS,
        max_rows=NEEDLE_ROWS,
    )
    check = check_engine(engine)
    assert check.holds and check.differing == ()  # the CPU engine is invariant by construction
    steps = engine.stats.trace
    rows = [step.rows for step in steps]
    for n in CROSSINGS:  # each crossing: its prefill's step and every decode step hold n rows
        assert rows.count(n) >= 3, (n, rows)
    # the last batch: the needle and a prompt longer than one step's prefill budget
    long = split_length(engine)
    assert long > engine.prefill_tokens
    split = steps[-(1 + 3 + 1) :]
    beside = [s for s in split if s.rows >= 1 and s.tokens > s.rows]  # the needle's row + prefill
    assert len(beside) >= 2, [(s.rows, s.tokens) for s in split]
    assert sum(s.tokens - s.rows for s in beside) >= long - engine.prefill_tokens


def test_every_property_that_changes_bits_changes_the_key_and_nothing_else(gpu, monkeypatch):
    model = tiny_model("qwen3", num_layers=1, seed=3)
    options = {"static_decode": True, "max_rows": 65, "invariant": True}
    base = cuda_key(model, options)

    def changed() -> bool:
        return cuda_key(model, options) != base

    # what does not change a GPU's bits: the values of the weights, a setting of no library,
    # the CPU's thread count and its MKL settings, the key computed again
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    monkeypatch.setenv("SOME_OTHER_SETTING", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "3")
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, threads - 1) if threads > 1 else 2)
    try:
        assert not changed()
    finally:
        torch.set_num_threads(threads)
    assert cuda_key(tiny_model("qwen3", num_layers=1, seed=5), options) == base

    edits = {
        "device name": lambda: setattr(gpu, "props", SimpleNamespace(**{**vars(H100), "name": "NVIDIA H200"})),
        "capability": lambda: setattr(gpu, "props", SimpleNamespace(**{**vars(H100), "major": 8})),
        "SM count": lambda: setattr(gpu, "props", SimpleNamespace(**{**vars(H100), "multi_processor_count": 114})),
        "driver": lambda: gpu.driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  560.35.03\n"),
        "CUDA": lambda: monkeypatch.setattr(torch.version, "cuda", "12.8"),
        "cuBLAS": lambda: gpu.wheels.update({"nvidia-cublas-cu12": "12.8.3.14"}),
        "cuBLAS mapped": lambda: gpu.maps.write_text("7f00-7f10 r-xp 0 08:01 42 /opt/libcublasLt.so.12.9.1.4\n"),
        "Triton": lambda: gpu.wheels.update({"triton": "3.4.0"}),
        "TF32 matmul": lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", True),
        "TF32 cuDNN": lambda: setattr(torch.backends.cudnn, "allow_tf32", False),
        "bf16 reduction": lambda: setattr(
            torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", False
        ),
        "CUBLAS_WORKSPACE_CONFIG": lambda: monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8"),
        "NVIDIA_TF32_OVERRIDE": lambda: monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0"),
        "engine options": lambda: options.update(static_decode=False),
    }  # fmt: skip
    for what, edit in edits.items():
        edit()
        assert changed(), what
        base = cuda_key(model, options)  # each edit on top of the last: each one counts
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if precision != "high" else "highest")
    try:
        assert changed(), "float32 matmul precision"
    finally:
        torch.set_float32_matmul_precision(precision)
    # the model's config, its shapes and its dtypes
    assert cuda_key(tiny_model("qwen3", num_layers=2, seed=3), options) != base
    assert cuda_key(tiny_model("llama", num_layers=1, seed=3), options) != base
    assert cuda_key(tiny_model("qwen3", num_layers=1, seed=3).to(torch.bfloat16), options) != base


def test_the_answer_is_kept_per_machine_and_read_back(gpu, tmp_path):
    model = tiny_model("qwen3", num_layers=1, seed=3)
    built = []

    def make_engine():
        built.append(Engine(model, max_batch_tokens=NEEDLE_SLOTS, max_rows=NEEDLE_ROWS))
        return built[-1]

    first = cached_cuda_check(model, make_engine, {"invariant": True})
    again = cached_cuda_check(model, make_engine, {"invariant": True})
    assert len(built) == 1 and not first.cached and again.cached
    assert again.to_manifest() == first.to_manifest() == json.loads(json.dumps(first.to_manifest()))
    assert first.to_manifest()["device"] == "cpu" and first.holds
    assert InvarianceCheck.from_manifest(first.to_manifest()).batches == first.batches
    gpu.props = SimpleNamespace(**{**vars(H100), "multi_processor_count": 114})  # another card
    cached_cuda_check(model, make_engine, {"invariant": True})
    assert len(built) == 2
    assert len(list((tmp_path / "cache" / "needle").glob("*.json"))) == 2
