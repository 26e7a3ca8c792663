"""Fixtures of the engine tests."""

from __future__ import annotations

import pytest
from helpers.engine_reference import ARCHS

from nudgeability.models.testing.tiny import tiny_model


@pytest.fixture(scope="module", params=ARCHS)
def tiny(request):
    """(arch, model): a tiny fp32 random model; Gemma 4's window (16) is shorter than every prefix."""
    return request.param, tiny_model(request.param, num_layers=4)
