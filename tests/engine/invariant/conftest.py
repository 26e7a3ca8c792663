"""Fixtures of the models tests."""

from __future__ import annotations

import pytest
import torch

from nudgeability.engine.invariant.cpu.cores import CORES


@pytest.fixture
def cores():
    """`CORES.resize`, with the core count and torch's thread count put back after the test."""
    before, threads = CORES.count, torch.get_num_threads()
    yield CORES.resize
    CORES.resize(before)
    torch.set_num_threads(threads)
