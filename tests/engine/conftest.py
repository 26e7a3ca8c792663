"""Fixtures of the engine tests."""

from __future__ import annotations

import collections

import pytest
import torch
from helpers.engine_reference import ARCHS

from nudgeability.engine import Engine
from nudgeability.models.testing.tiny import tiny_model


@pytest.fixture(scope="module", params=ARCHS)
def tiny(request):
    """(arch, model): a tiny fp32 random model; Gemma 4's window (16) is shorter than every prefix."""
    return request.param, tiny_model(request.param, num_layers=4)


# every way Python code can read a tensor's value on the host
HOST_READS = ("tolist", "item", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy")


@pytest.fixture
def host_reads(monkeypatch):
    """Counts of host reads made inside each `Engine.step` (one counter per step)."""
    per_step: list[collections.Counter] = []
    inside = []

    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            if inside:
                per_step[-1][_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)

    step = Engine.step

    def counted_step(self):
        per_step.append(collections.Counter())
        inside.append(True)
        try:
            return step(self)
        finally:
            inside.pop()

    monkeypatch.setattr(Engine, "step", counted_step)
    return per_step
